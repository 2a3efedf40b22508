/**
 * Signed, hash-chained run events: each event has a seq (from 1), the hash of
 * the previous event of its run and the executor's signature, so any holder
 * can serve it and any receiver can check it without trusting the holder.
 * The run id names its executor (`<agentId>:<random>`).
 */
import { createHash, randomBytes } from 'node:crypto'
import type { PrivateKey } from '@libp2p/interface'
import {
  EVENT_MAX_BYTES, EVENT_PAYLOAD_MAX_BYTES, EVENT_SIGNING_DOMAIN
} from '../constants.ts'
import { InvalidRequestError, InvalidSignatureError } from '../errors.ts'
import { canonicalJson, sign, signingBytes } from '../identity/signing.ts'
import { processSignatures, type SignatureCache } from '../identity/signature-cache.ts'
import { nestedDeeperThan } from '../util/json-depth.ts'
import { EVENT_PAYLOAD_MAX_DEPTH } from './constants.ts'
import { schema } from '../schema/validate.ts'
import type { AgentEvent, UnsignedEvent } from './types.ts'
import { assertVerdictShape } from './verdict-shape.ts'

// the cache moved down to identity (cards verify through it too); the run log's callers import it from here
export { processSignatures, SignatureCache, type SignatureCacheStats } from '../identity/signature-cache.ts'

export const isAgentEvent = schema<AgentEvent>('aap:events#/definitions/AgentEvent')

/** The agent that executes a run is named in its id: `<agentId>:<random>`. */
export function executorOfRun (runId: string): string {
  const i = runId.indexOf(':')
  return i <= 0 ? '' : runId.slice(0, i)
}

/** A new run id of `agentId`: the executor is named in it, so any holder knows whose key signs its events. */
export function newRunId (agentId: string): string {
  return `${agentId}:${randomBytes(12).toString('hex')}`
}

/**
 * The canonical JSON of events, by event object: the same event is encoded
 * when it is signed, published, stored and hashed as the next event's
 * `prev`, and the encoding is the larger part of each of those. Events are
 * never changed once signed (a change would break the signature), so the
 * text of an object stays its text.
 */
const canonicalTexts = new WeakMap<AgentEvent, string>()

/** canonicalJson(event), encoded once per event object. */
export function canonicalEvent (event: AgentEvent): string {
  let text = canonicalTexts.get(event)
  if (text === undefined) {
    text = canonicalJson(event)
    canonicalTexts.set(event, text)
  }
  return text
}

/** Record the canonical text of an event whose signer built it along with the signature (signer.ts). */
export function knowCanonical (event: AgentEvent, text: string): void {
  canonicalTexts.set(event, text)
}

export function eventHash (event: AgentEvent): string {
  return createHash('sha256').update(canonicalEvent(event)).digest('hex')
}

export async function signEvent (key: PrivateKey, unsigned: UnsignedEvent): Promise<AgentEvent> {
  assertPayloadDepth(unsigned.payload)
  const payloadBytes = Buffer.byteLength(canonicalJson(unsigned.payload))
  if (payloadBytes > EVENT_PAYLOAD_MAX_BYTES) {
    throw new InvalidRequestError(`event payload is ${payloadBytes} bytes, over ${EVENT_PAYLOAD_MAX_BYTES}`, { reason: 'oversized' })
  }
  return { ...unsigned, signature: await sign(key, EVENT_SIGNING_DOMAIN, unsigned) }
}

/** INVALID_REQUEST (too_deep) for a payload nested deeper than EVENT_PAYLOAD_MAX_DEPTH; checked before it is encoded. */
export function assertPayloadDepth (payload: unknown): void {
  if (nestedDeeperThan(payload, EVENT_PAYLOAD_MAX_DEPTH)) {
    throw new InvalidRequestError(`event payload is nested deeper than ${EVENT_PAYLOAD_MAX_DEPTH} levels`, { reason: 'too_deep', max: EVENT_PAYLOAD_MAX_DEPTH })
  }
}

const EVENT_SIGNING_DOMAIN_BYTES = Buffer.byteLength(EVENT_SIGNING_DOMAIN)

/**
 * True only when `signature` is `agentId`'s Ed25519 signature of `signed`
 * (bytes that carry their own domain prefix). Never throws. Shared by every
 * signed record of the run log (events, tickets); `signatures` is the node's
 * own cache (the process's when none is given).
 */
export function verifySignedBytes (agentId: string, signed: Uint8Array, signature: string, signatures: SignatureCache = processSignatures): boolean {
  return signatures.verify(agentId, signed, signature)
}

/**
 * Shape, size, attribution and signature. Throws INVALID_REQUEST for shape or
 * size, INVALID_SIGNATURE when the executor named by the run id did not sign it.
 */
export async function verifyEvent (value: unknown, signatures?: SignatureCache): Promise<AgentEvent> {
  return verifyEventSync(value, signatures)
}

/**
 * verifyEvent without the promise: a gossip validator that can decide at once
 * does not give up its turn in the event loop.
 */
export function verifyEventSync (value: unknown, signatures: SignatureCache = processSignatures): AgentEvent {
  const event = isAgentEvent.assert(value, 'event')
  assertPayloadDepth(event.payload)
  // JSON.stringify of parsed JSON is as long as its canonical form (only key order differs), and cheaper
  if (Buffer.byteLength(JSON.stringify(event.payload)) > EVENT_PAYLOAD_MAX_BYTES) throw new InvalidRequestError('event payload is oversized', { reason: 'oversized' })
  if (event.executor !== executorOfRun(event.run_id)) {
    throw new InvalidSignatureError('event is attributed to an agent that does not execute its run', { reason: 'misattributed' })
  }
  if ((event.seq === 1) !== (event.prev === null)) throw new InvalidRequestError('only the first event of a run has no prev', { reason: 'bad_chain' })
  // a liveness verdict is the one event signed by someone else: the delegator (verdict.ts checks who)
  const signer = event.declared_by ?? event.executor
  if (event.declared_by !== undefined) assertVerdictShape(event)
  const { signature, ...unsigned } = event
  const signed = signingBytes(EVENT_SIGNING_DOMAIN, unsigned)
  // the canonical event is the unsigned one plus `,"signature":"..."`
  const size = signed.byteLength - EVENT_SIGNING_DOMAIN_BYTES + ',"signature":'.length + Buffer.byteLength(JSON.stringify(signature))
  if (size > EVENT_MAX_BYTES) throw new InvalidRequestError('event is oversized', { reason: 'oversized' })
  if (!signatures.verify(signer, signed, signature)) {
    throw new InvalidSignatureError('event signature does not verify with its signer\'s key', { reason: 'bad_signature' })
  }
  return event
}

/** Check that `events` (one run, ascending) continue a chain whose head is `prev`. */
export function checkChain (events: AgentEvent[], prev: AgentEvent | undefined): void {
  let head = prev
  for (const e of events) {
    const wantSeq = head === undefined ? 1 : head.seq + 1
    if (e.seq !== wantSeq) throw new InvalidRequestError(`event seq ${e.seq} where ${wantSeq} was expected`, { reason: 'gap' })
    const wantPrev = head === undefined ? null : eventHash(head)
    if (e.prev !== wantPrev) throw new InvalidRequestError(`event ${e.run_id}#${e.seq} does not chain to its predecessor`, { reason: 'bad_chain' })
    if (head !== undefined && (e.run_id !== head.run_id || e.correlation_id !== head.correlation_id)) {
      throw new InvalidRequestError('event changes run or correlation mid-log', { reason: 'bad_chain' })
    }
    head = e
  }
}

