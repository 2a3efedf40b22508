/**
 * The agent card of an A2A server the outbound bridge (src/a2a/outbound.ts)
 * joins, read as what it is: input from a server the node does not control.
 * Its shape is checked field by field (a card that is not one is
 * INVALID_REQUEST, not a TypeError deep in the mapping), and only the
 * interfaces the bridge can speak are kept, on the origin the operator
 * configured and under the configured base URL's path: the SDK connects to
 * whatever URL the card names, so a card that named another host would send
 * the delegator's input there, and one that named another path of the same
 * origin would send it to another application (a base URL of
 * `https://gw.example/a2a/` is not `https://gw.example/admin/`). Those at the
 * configured origin and under its path are kept; when there are none, the
 * paths of those at other origins are taken to it (a server that names the
 * host it binds, not the one it is reached by), and kept only if they land
 * under the base path. Paths are compared by whole segments: `/a2a` does not
 * take `/a2a-evil`.
 */
import type { AgentCard as A2aCard, AgentInterface, AgentSkill } from '@a2a-js/sdk'
import { InvalidRequestError } from '../errors.ts'
import { isRecord } from './mapping.ts'

/** The protocol bindings the bridge's transports speak. */
const BINDINGS = new Set(['JSONRPC', 'HTTP+JSON'])

function refuse (base: URL, what: string): never {
  throw new InvalidRequestError(`the A2A agent card of ${base.href.slice(0, 200)} is malformed: ${what}`)
}

function isStringList (v: unknown): v is string[] {
  return Array.isArray(v) && v.every(s => typeof s === 'string')
}

/** A skill as the mapping reads it: its id a string, its tags strings (none when the card leaves them out). */
function checkedSkill (s: unknown, i: number, base: URL): AgentSkill {
  if (!isRecord(s) || typeof s.id !== 'string') refuse(base, `skills[${i}] has no string id`)
  if (s.tags !== undefined && !isStringList(s.tags)) refuse(base, `skills[${i}].tags is not a list of strings`)
  return { ...(s as unknown as AgentSkill), tags: s.tags ?? [] }
}

/**
 * An interface the bridge can speak, its URL made absolute, or undefined: a 1.x JSON-RPC or HTTP+JSON binding with a
 * URL. `here` says whether it has the configured base URL's origin (same scheme, host and port).
 */
function usableInterface (i: unknown, base: URL): { iface: AgentInterface, here: boolean } | undefined {
  if (!isRecord(i) || typeof i.url !== 'string' || typeof i.protocolBinding !== 'string' || typeof i.protocolVersion !== 'string') return undefined
  if (!BINDINGS.has(i.protocolBinding) || !i.protocolVersion.startsWith('1.')) return undefined
  if (i.tenant !== undefined && typeof i.tenant !== 'string') return undefined
  // relative to the card's base URL, as a link on a page is; one that is no URL at all is as unusable as another binding
  const url = URL.parse(i.url, base.href)
  if (url === null) return undefined
  return { iface: { url: url.href, protocolBinding: i.protocolBinding, protocolVersion: i.protocolVersion, tenant: i.tenant ?? '' }, here: url.origin === base.origin }
}

/**
 * The URL's path is the base URL's, or below it, by whole segments. The base URL ends with `/` (outbound.ts adds
 * it), so `/a2a/` takes `/a2a`, `/a2a/` and `/a2a/rpc`, and not `/a2a-evil/rpc`.
 */
export function underBase (url: string, base: URL): boolean {
  const path = new URL(url).pathname
  const root = base.pathname.endsWith('/') ? base.pathname : `${base.pathname}/`
  return path.startsWith(root) || path === root.slice(0, -1)
}

/** The interface with its path and query moved onto the configured origin. */
function onBase (i: AgentInterface, base: URL): AgentInterface {
  const url = new URL(i.url)
  return { ...i, url: new URL(`${url.pathname}${url.search}`, base.origin).href }
}

/**
 * A card checked by checkedCard, whether its interfaces were named at another origin and moved onto the configured
 * one, and how many usable interfaces were left out for a path outside the configured base URL's.
 */
export interface CheckedCard { card: A2aCard, moved: boolean, outside: number }

/**
 * The card `raw` checked, with only the interfaces the bridge may use, all at the configured origin and under its
 * base path (see above):
 * INVALID_REQUEST when a field the bridge reads has the wrong shape, or when no interface is left. The SDK's client is made from this
 * card, so it can only pick an interface checked here.
 */
export function checkedCard (raw: unknown, base: URL): CheckedCard {
  if (!isRecord(raw)) refuse(base, 'it is not a JSON object')
  if (typeof raw.name !== 'string') refuse(base, 'name is not a string')
  if (raw.description !== undefined && typeof raw.description !== 'string') refuse(base, 'description is not a string')
  if (typeof raw.version !== 'string') refuse(base, 'version is not a string')
  if (!Array.isArray(raw.supportedInterfaces)) refuse(base, 'supportedInterfaces is not a list')
  if (!Array.isArray(raw.skills)) refuse(base, 'skills is not a list')
  if (raw.capabilities !== undefined && !isRecord(raw.capabilities)) refuse(base, 'capabilities is not an object')
  const skills = raw.skills.map((s, i) => checkedSkill(s, i, base))
  const offered = raw.supportedInterfaces.length
  const usable = raw.supportedInterfaces.flatMap(i => usableInterface(i, base) ?? [])
  const here = usable.filter(u => u.here).map(u => u.iface)
  const kept = here.filter(i => underBase(i.url, base))
  // servers often name their interface by the host they bind (localhost, 0.0.0.0) or an inner name, not the one the
  // operator reaches them by: with none kept at the configured origin, the path of each other one goes there, and
  // stays only under the base path; nothing goes elsewhere
  const moved = kept.length > 0 ? [] : usable.filter(u => !u.here).map(u => onBase(u.iface, base))
  const supportedInterfaces = kept.length > 0 ? kept : moved.filter(i => underBase(i.url, base))
  // those at the configured origin not kept, and those moved there that landed outside the base path
  const outside = (here.length - kept.length) + (moved.length - (kept.length > 0 ? 0 : supportedInterfaces.length))
  if (supportedInterfaces.length === 0) {
    const past = outside > 0 ? `; ${outside} of them at paths outside ${base.pathname.slice(0, 200)}, which are not used` : ''
    throw new InvalidRequestError(`the A2A agent at ${base.href.slice(0, 200)} offers no A2A 1.x JSON-RPC or HTTP+JSON interface under its URL (of ${offered} interfaces${past})`)
  }
  return { card: { ...(raw as unknown as A2aCard), description: raw.description ?? '', skills, supportedInterfaces }, moved: kept.length === 0, outside }
}
