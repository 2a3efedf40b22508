/**
 * The agent card of an A2A server the outbound bridge (src/a2a/outbound.ts)
 * joins, read as what it is: input from a server the node does not control.
 * Its shape is checked field by field (a card that is not one is
 * INVALID_REQUEST, not a TypeError deep in the mapping), and only the
 * interfaces the bridge can speak are kept, on the origin the operator
 * configured: the SDK connects to whatever URL the card names, so a card that
 * named another host would send the delegator's input there. Those at the
 * configured origin are kept; when there are none, the others' paths are
 * taken to it (a server that names the host it binds, not the one it is
 * reached by).
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

/** The interface with its path and query moved onto the configured origin. */
function onBase (i: AgentInterface, base: URL): AgentInterface {
  const url = new URL(i.url)
  return { ...i, url: new URL(`${url.pathname}${url.search}`, base.origin).href }
}

/** A card checked by checkedCard, and whether its interfaces were named at another origin and moved onto the configured one. */
export interface CheckedCard { card: A2aCard, moved: boolean }

/**
 * The card `raw` checked, with only the interfaces the bridge may use, all at the configured origin (see above):
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
  // servers often name their interface by the host they bind (localhost, 0.0.0.0) or an inner name, not the one the
  // operator reaches them by: with none at the configured origin, the path of each goes there; nothing goes elsewhere
  const supportedInterfaces = here.length > 0 ? here : usable.map(u => onBase(u.iface, base))
  if (supportedInterfaces.length === 0) {
    throw new InvalidRequestError(`the A2A agent at ${base.href.slice(0, 200)} offers no A2A 1.x JSON-RPC or HTTP+JSON interface (of ${offered} interfaces)`)
  }
  return { card: { ...(raw as unknown as A2aCard), description: raw.description ?? '', skills, supportedInterfaces }, moved: here.length === 0 }
}
