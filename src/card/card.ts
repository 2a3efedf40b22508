/**
 * AgentCard: the profile's fields plus tags, seq, issued_at, expires_at and a
 * signature by the key that the agent id certifies. Schema:
 * protocols/card.schema.json. A card is only ever handed upward after
 * `verifyCard` accepted it.
 */
import type { PrivateKey } from '@libp2p/interface'
import { CID } from 'multiformats/cid'
import * as raw from 'multiformats/codecs/raw'
import { sha256 } from 'multiformats/hashes/sha2'
import { fromString, toString } from 'uint8arrays'
import {
  CARD_DHT_NAMESPACE, CARD_MAX_BYTES, CARD_MAX_CLOCK_SKEW_MS, CARD_PROTOCOL_NAME, CARD_SIGNING_DOMAIN, CARD_TTL_MS
} from '../constants.ts'
import { InvalidRequestError, InvalidSignatureError } from '../errors.ts'
import { agentIdOf } from '../identity/identity.ts'
import { canonicalJson, sign, signingBytes, verify } from '../identity/signing.ts'
import type { SignatureCache } from '../identity/signature-cache.ts'
import { schema } from '../schema/validate.ts'

export interface CapabilityRef {
  capability_id: string
  version: string
}

/** A capability query: `version` null, absent or "*" matches every version. */
export interface CapabilityQuery {
  capability_id: string
  version?: string | null
}

export interface AgentCard {
  agent_id: string
  name: string
  description: string
  capabilities: CapabilityRef[]
  /** Transport reference (`/p2p/<peerId>`); never shown above the discovery layer's callers in HACP. */
  endpoint: string
  protocol: string
  tags: string[]
  seq: number
  issued_at: string
  expires_at: string
  signature: string
}

export type UnsignedCard = Omit<AgentCard, 'signature'>

/** What an operator chooses; the rest of the card is derived. */
export interface CardDraft {
  name: string
  description?: string
  capabilities?: CapabilityRef[]
  tags?: string[]
}

export const isAgentCard = schema<AgentCard>('aap:card#/definitions/AgentCard')
const isDraftCapability = schema<CapabilityRef>('aap:common#/definitions/CapabilityRef')
const isTag = schema<string>('aap:common#/definitions/Tag')

export function capabilityString (c: CapabilityQuery): string {
  return c.version === undefined || c.version === null || c.version === '*' ? c.capability_id : `${c.capability_id}@${c.version}`
}

/** Parse `cap:id@1.2.3` or `cap:id` (any version). The last `@` splits. */
export function parseCapability (text: string): CapabilityQuery {
  const at = text.lastIndexOf('@')
  const q: CapabilityQuery = at > 0 ? { capability_id: text.slice(0, at), version: text.slice(at + 1) } : { capability_id: text, version: null }
  schema<CapabilityQuery>('aap:common#/definitions/CapabilityQuery').assert(q, `capability "${text.slice(0, 80)}"`)
  return q
}

const DRAFT_FIELDS: ReadonlySet<string> = new Set(['name', 'description', 'capabilities', 'tags'])

/**
 * Check an operator-supplied CardDraft (a card file, an API body) and return a
 * clean copy. Unknown fields are refused, so a typo such as "capability" is an
 * error instead of a card without capabilities. INVALID_REQUEST on any fault.
 */
export function parseCardDraft (value: unknown, what = 'card draft'): CardDraft {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidRequestError(`${what} must be a JSON object`)
  const fields = value as Record<string, unknown>
  for (const k of Object.keys(fields)) {
    if (!DRAFT_FIELDS.has(k)) throw new InvalidRequestError(`${what} has an unknown field "${k.slice(0, 64)}" (expected name, description, capabilities, tags)`, { field: k.slice(0, 64) })
  }
  const { name, description, capabilities, tags } = fields
  if (typeof name !== 'string' || name.length === 0) throw new InvalidRequestError(`${what} needs a non-empty "name"`, { field: 'name' })
  const draft: CardDraft = { name }
  if (description !== undefined) {
    if (typeof description !== 'string') throw new InvalidRequestError(`${what}: "description" must be a string`, { field: 'description' })
    draft.description = description
  }
  if (capabilities !== undefined) {
    if (!Array.isArray(capabilities)) throw new InvalidRequestError(`${what}: "capabilities" must be an array of {capability_id, version}`, { field: 'capabilities' })
    draft.capabilities = capabilities.map(c => isDraftCapability.assert(c, `${what} capability`))
      .map(c => ({ capability_id: c.capability_id, version: c.version }))
  }
  if (tags !== undefined) {
    if (!Array.isArray(tags)) throw new InvalidRequestError(`${what}: "tags" must be an array of strings`, { field: 'tags' })
    draft.tags = tags.map(t => isTag.assert(t, `${what} tag`))
  }
  return draft
}

/** The draft a card was issued from (to re-sign it, e.g. after a restart). */
export function draftOf (card: AgentCard): CardDraft {
  return { name: card.name, description: card.description, capabilities: card.capabilities, tags: card.tags }
}

export function endpointOf (agentId: string): string {
  return `/p2p/${agentId}`
}

/** Build and sign a card. Throws INVALID_REQUEST for a draft that breaks the schema. */
export async function issueCard (key: PrivateKey, draft: CardDraft, seq: number, now = Date.now()): Promise<AgentCard> {
  const agentId = agentIdOf(key)
  const caps = draft.capabilities ?? []
  for (const c of caps) isDraftCapability.assert(c, 'capability')
  for (const t of draft.tags ?? []) isTag.assert(t, 'tag')
  const unsigned: UnsignedCard = {
    agent_id: agentId,
    name: draft.name,
    description: draft.description ?? '',
    capabilities: dedupe(caps.map(c => ({ capability_id: c.capability_id, version: c.version })), capabilityString),
    endpoint: endpointOf(agentId),
    protocol: CARD_PROTOCOL_NAME,
    tags: [...new Set(draft.tags ?? [])],
    seq,
    issued_at: new Date(now).toISOString(),
    expires_at: new Date(now + CARD_TTL_MS).toISOString()
  }
  const card: AgentCard = { ...unsigned, signature: await sign(key, CARD_SIGNING_DOMAIN, unsigned) }
  isAgentCard.assert(card, 'card')
  assertSize(card)
  return card
}

function dedupe<T> (items: T[], keyOf: (t: T) => string): T[] {
  const seen = new Map<string, T>()
  for (const i of items) seen.set(keyOf(i), i)
  return [...seen.values()]
}

function assertSize (card: AgentCard): void {
  const size = Buffer.byteLength(canonicalJson(card))
  if (size > CARD_MAX_BYTES) throw new InvalidRequestError(`card is ${size} bytes, over the ${CARD_MAX_BYTES} byte limit`, { reason: 'oversized' })
}

export interface VerifyOptions {
  now?: number
  /** The agent id the card must belong to (e.g. the peer that served it). */
  expectAgent?: string
  /**
   * Skip the issued/expiry checks against the clock (the validity window itself
   * is still checked). Only for a node reloading its own stored card, which it
   * re-signs before serving it.
   */
  ignoreTime?: boolean
  /**
   * The node's verification cache (identity/signature-cache.ts): a card whose
   * very bytes and signature it verified before is not checked with Ed25519
   * again. Absent: always checked.
   */
  signatures?: SignatureCache
}

/**
 * Check shape, size, expiry and signature. Returns the card typed, or throws
 * INVALID_REQUEST (shape, size, expiry) or INVALID_SIGNATURE (key, signature).
 */
export async function verifyCard (value: unknown, opts: VerifyOptions = {}): Promise<AgentCard> {
  const card = isAgentCard.assert(value, 'card')
  assertSize(card)
  const now = opts.now ?? Date.now()
  if (opts.expectAgent !== undefined && card.agent_id !== opts.expectAgent) {
    throw new InvalidSignatureError('card belongs to another agent than the one that served it', { reason: 'wrong_agent' })
  }
  if (card.endpoint !== endpointOf(card.agent_id)) {
    throw new InvalidSignatureError('card endpoint names another peer than its agent id', { reason: 'wrong_endpoint' })
  }
  const issued = Date.parse(card.issued_at)
  const expires = Date.parse(card.expires_at)
  if (!(expires > issued) || expires - issued > CARD_TTL_MS * 2) throw new InvalidRequestError('card validity window is invalid', { reason: 'bad_validity' })
  if (opts.ignoreTime !== true) {
    if (issued > now + CARD_MAX_CLOCK_SKEW_MS) throw new InvalidRequestError('card is issued in the future', { reason: 'not_yet_valid' })
    if (expires <= now) throw new InvalidRequestError('card has expired', { reason: 'expired' })
  }
  const { signature, ...unsigned } = card
  const valid = opts.signatures === undefined
    ? await verify(card.agent_id, CARD_SIGNING_DOMAIN, unsigned, signature)
    : opts.signatures.verify(card.agent_id, signingBytes(CARD_SIGNING_DOMAIN, unsigned), signature)
  if (!valid) {
    throw new InvalidSignatureError('card signature does not verify with the key of its agent id', { reason: 'bad_signature' })
  }
  return card
}

export function cardMatches (card: AgentCard, query: { capability?: CapabilityQuery | null, tags?: string[] | null }): boolean {
  const cap = query.capability
  if (cap !== undefined && cap !== null) {
    const anyVersion = cap.version === undefined || cap.version === null || cap.version === '*'
    if (!card.capabilities.some(c => c.capability_id === cap.capability_id && (anyVersion || c.version === cap.version))) return false
  }
  for (const t of query.tags ?? []) if (!card.tags.includes(t)) return false
  return true
}

export function supports (card: AgentCard, cap: CapabilityRef): boolean {
  return card.capabilities.some(c => c.capability_id === cap.capability_id && c.version === cap.version)
}

// ---- DHT keys -------------------------------------------------------------------

const enc = new TextEncoder()

export function cardRecordKey (agentId: string): Uint8Array {
  return enc.encode(`/${CARD_DHT_NAMESPACE}/${agentId}`)
}

export function agentOfRecordKey (key: Uint8Array): string {
  const text = new TextDecoder().decode(key)
  const prefix = `/${CARD_DHT_NAMESPACE}/`
  if (!text.startsWith(prefix)) throw new InvalidRequestError('not a card record key')
  return text.slice(prefix.length)
}

export function encodeCardRecord (card: AgentCard): Uint8Array {
  return fromString(canonicalJson(card))
}

export function decodeCardRecord (bytes: Uint8Array): unknown {
  if (bytes.byteLength > CARD_MAX_BYTES) throw new InvalidRequestError('card record is oversized', { reason: 'oversized' })
  try {
    return JSON.parse(toString(bytes))
  } catch (err) {
    throw new InvalidRequestError('card record is not JSON', { reason: 'malformed' }, { cause: err })
  }
}

async function keyCid (text: string): Promise<CID> {
  return CID.createV1(raw.code, await sha256.digest(enc.encode(text)))
}

/**
 * Provider key for a capability id, whatever the version. A query for one
 * exact version looks this key up and keeps the cards that declare it: one
 * key per capability id instead of one per version too saves a DHT walk per
 * CapabilityRef on every announcement, and versions of one capability are few.
 */
export async function capabilityKey (capabilityId: string): Promise<CID> {
  return keyCid(`aap/cap-any/0.1.0/${capabilityId}`)
}

export async function tagKey (tag: string): Promise<CID> {
  return keyCid(`aap/tag/0.1.0/${tag}`)
}

/** Every provider key a card is announced under: one per capability id, one per tag. */
export async function providerKeys (card: AgentCard): Promise<CID[]> {
  const keys: CID[] = []
  const seen = new Set<string>()
  const add = (cid: CID): void => {
    if (!seen.has(cid.toString())) { seen.add(cid.toString()); keys.push(cid) }
  }
  for (const c of card.capabilities) add(await capabilityKey(c.capability_id))
  for (const t of card.tags) add(await tagKey(t))
  return keys
}

/** kad-dht validator: the record is a valid, unexpired card of the agent named in its key. */
export async function validateCardRecord (key: Uint8Array, value: Uint8Array): Promise<void> {
  await verifyCard(decodeCardRecord(value), { expectAgent: agentOfRecordKey(key) })
}

/**
 * Order two verified cards of one agent: the higher seq is newer; on equal seq
 * (which a correct signer never produces) the later expiry wins, so every node
 * picks the same one. Positive when `a` is newer than `b`.
 */
export function compareCards (a: AgentCard, b: AgentCard): number {
  if (a.seq !== b.seq) return a.seq - b.seq
  return Date.parse(a.expires_at) - Date.parse(b.expires_at)
}

async function verifiedOrUndefined (check: () => Promise<AgentCard>): Promise<AgentCard | undefined> {
  try {
    return await check()
  } catch {
    return undefined // not a valid card: it takes no part in the choice
  }
}

/** kad-dht selector: the newest (highest seq) among records that still verify. */
export async function selectCardRecord (key: Uint8Array, records: Uint8Array[]): Promise<number> {
  let best = 0
  let bestCard: AgentCard | undefined
  for (let i = 0; i < records.length; i++) {
    const rec = records[i]
    if (rec === undefined) continue
    // an invalid record never wins (the validator refused it when it was stored; this one came from a peer)
    const card = await verifiedOrUndefined(async () => verifyCard(decodeCardRecord(rec), { expectAgent: agentOfRecordKey(key) }))
    if (card !== undefined && (bestCard === undefined || compareCards(card, bestCard) > 0)) { best = i; bestCard = card }
  }
  return best
}
