/**
 * The agent card of an A2A server the outbound bridge (src/a2a/outbound.ts)
 * joins, read as what it is: input from a server the node does not control.
 * Its shape is checked field by field (a card that is not one is
 * INVALID_REQUEST, not a TypeError deep in the mapping), and only the
 * interfaces the bridge can speak and that stay on the origin the operator
 * configured are kept: the SDK connects to whatever URL the card names, so a
 * card that named another host would send the delegator's input there.
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
 * An interface the bridge may use, its URL made absolute, or undefined: a 1.x JSON-RPC or HTTP+JSON binding whose
 * URL has the configured base URL's origin (same scheme, host and port).
 */
function usableInterface (i: unknown, base: URL): AgentInterface | undefined {
  if (!isRecord(i) || typeof i.url !== 'string' || typeof i.protocolBinding !== 'string' || typeof i.protocolVersion !== 'string') return undefined
  if (!BINDINGS.has(i.protocolBinding) || !i.protocolVersion.startsWith('1.')) return undefined
  if (i.tenant !== undefined && typeof i.tenant !== 'string') return undefined
  // relative to the card's base URL, as a link on a page is; one that is no URL at all is as unusable as another binding
  const url = URL.parse(i.url, base.href)
  if (url === null || url.origin !== base.origin) return undefined
  return { url: url.href, protocolBinding: i.protocolBinding, protocolVersion: i.protocolVersion, tenant: i.tenant ?? '' }
}

/**
 * The card `raw` checked, with only the interfaces the bridge may use (see usableInterface): INVALID_REQUEST when
 * a field the bridge reads has the wrong shape, or when no interface is left. The SDK's client is made from this
 * card, so it can only pick an interface checked here.
 */
export function checkedCard (raw: unknown, base: URL): A2aCard {
  if (!isRecord(raw)) refuse(base, 'it is not a JSON object')
  if (typeof raw.name !== 'string') refuse(base, 'name is not a string')
  if (raw.description !== undefined && typeof raw.description !== 'string') refuse(base, 'description is not a string')
  if (typeof raw.version !== 'string') refuse(base, 'version is not a string')
  if (!Array.isArray(raw.supportedInterfaces)) refuse(base, 'supportedInterfaces is not a list')
  if (!Array.isArray(raw.skills)) refuse(base, 'skills is not a list')
  if (raw.capabilities !== undefined && !isRecord(raw.capabilities)) refuse(base, 'capabilities is not an object')
  const skills = raw.skills.map((s, i) => checkedSkill(s, i, base))
  const offered = raw.supportedInterfaces.length
  const supportedInterfaces = raw.supportedInterfaces.flatMap(i => usableInterface(i, base) ?? [])
  if (supportedInterfaces.length === 0) {
    throw new InvalidRequestError(`the A2A agent at ${base.href.slice(0, 200)} offers no A2A 1.x JSON-RPC or HTTP+JSON interface at its own origin ${base.origin.slice(0, 200)} (of ${offered} interfaces)`)
  }
  return { ...(raw as unknown as A2aCard), description: raw.description ?? '', skills, supportedInterfaces }
}
