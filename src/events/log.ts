/**
 * The per-run event log: the truth about a run, gossip only carries copies.
 * Each event has a seq (from 1), the hash of the previous event and the
 * executor's signature, so any holder can serve it and any receiver can check
 * it without trusting the holder.
 */
import { createHash, createPublicKey, verify as verifySignature, type KeyObject } from 'node:crypto'
import type { PrivateKey } from '@libp2p/interface'
import { Key, type Batch, type Datastore } from 'interface-datastore'
import {
  EVENT_MAX_BYTES, EVENT_PAYLOAD_MAX_BYTES, EVENT_SIGNING_DOMAIN, EVENT_VERIFIED_CACHE_ENTRIES, EVENT_VERIFY_KEY_CACHE_ENTRIES,
  SYNC_MAX_EVENTS_PER_RESPONSE
} from '../constants.ts'
import { InvalidRequestError, InvalidSignatureError } from '../errors.ts'
import { publicKeyOfAgent } from '../identity/identity.ts'
import { canonicalJson, sign, signingBytes } from '../identity/signing.ts'
import { schema } from '../schema/validate.ts'
import type { AgentEvent, UnsignedEvent } from '../runs/types.ts'

export const isAgentEvent = schema<AgentEvent>('aap:events#/definitions/AgentEvent')

/** The agent that executes a run is named in its id: `<agentId>:<random>`. */
export function executorOfRun (runId: string): string {
  const i = runId.indexOf(':')
  return i <= 0 ? '' : runId.slice(0, i)
}

export function eventHash (event: AgentEvent): string {
  return createHash('sha256').update(canonicalJson(event)).digest('hex')
}

export async function signEvent (key: PrivateKey, unsigned: UnsignedEvent): Promise<AgentEvent> {
  const payloadBytes = Buffer.byteLength(canonicalJson(unsigned.payload))
  if (payloadBytes > EVENT_PAYLOAD_MAX_BYTES) {
    throw new InvalidRequestError(`event payload is ${payloadBytes} bytes, over ${EVENT_PAYLOAD_MAX_BYTES}`, { reason: 'oversized' })
  }
  return { ...unsigned, signature: await sign(key, EVENT_SIGNING_DOMAIN, unsigned) }
}

/**
 * Executor keys, imported once. Every node verifies every event it is sent,
 * and parsing the agent id plus importing the key each time cost more than
 * the Ed25519 check itself. Bounded; the oldest entry goes first.
 */
const verifyKeys = new Map<string, KeyObject>()

function executorKey (agentId: string): KeyObject | undefined {
  let key = verifyKeys.get(agentId)
  if (key !== undefined) return key
  try {
    const pub = publicKeyOfAgent(agentId)
    if (pub.type !== 'Ed25519') return undefined
    key = createPublicKey({ format: 'jwk', key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(pub.raw).toString('base64url') } })
  } catch {
    return undefined
  }
  if (verifyKeys.size >= EVENT_VERIFY_KEY_CACHE_ENTRIES) {
    const oldest = verifyKeys.keys().next()
    if (oldest.done !== true) verifyKeys.delete(oldest.value)
  }
  verifyKeys.set(agentId, key)
  return key
}

const EVENT_SIGNING_DOMAIN_BYTES = Buffer.byteLength(EVENT_SIGNING_DOMAIN)

/**
 * Signatures that verified, by the SHA-256 of the signed bytes (which name the
 * executor, whose agent id is the key) and the signature itself: the same
 * event met again (a sync that re-fetches what gossip brought, a tail sync
 * that pulls a whole correlation, many nodes of one process) is not checked
 * again. Only successes are kept, so a forged or mutated event is always
 * checked. Bounded; the oldest entry goes first.
 */
const verifiedSignatures = new Set<string>()

/** True only when `signature` is `agentId`'s Ed25519 signature of `signed`. Never throws. */
function verifyEventSignature (agentId: string, signed: Uint8Array, signature: string): boolean {
  const key = executorKey(agentId)
  if (key === undefined) return false
  try {
    const sig = Buffer.from(signature, 'base64url')
    if (sig.byteLength !== 64) return false
    // the key names the agent too, so a cached verdict can never vouch for another signer
    const seen = `${agentId} ${createHash('sha256').update(signed).digest('base64')} ${signature}`
    if (verifiedSignatures.has(seen)) return true
    if (!verifySignature(null, signed, key, sig)) return false
    if (verifiedSignatures.size >= EVENT_VERIFIED_CACHE_ENTRIES) {
      const oldest = verifiedSignatures.values().next()
      if (oldest.done !== true) verifiedSignatures.delete(oldest.value)
    }
    verifiedSignatures.add(seen)
    return true
  } catch {
    return false
  }
}

/**
 * Shape, size, attribution and signature. Throws INVALID_REQUEST for shape or
 * size, INVALID_SIGNATURE when the executor named by the run id did not sign it.
 */
export async function verifyEvent (value: unknown): Promise<AgentEvent> {
  return verifyEventSync(value)
}

/**
 * verifyEvent without the promise: a gossip validator that can decide at once
 * does not give up its turn in the event loop.
 */
export function verifyEventSync (value: unknown): AgentEvent {
  const event = isAgentEvent.assert(value, 'event')
  if (Buffer.byteLength(canonicalJson(event.payload)) > EVENT_PAYLOAD_MAX_BYTES) throw new InvalidRequestError('event payload is oversized', { reason: 'oversized' })
  if (event.executor !== executorOfRun(event.run_id)) {
    throw new InvalidSignatureError('event is attributed to an agent that does not execute its run', { reason: 'misattributed' })
  }
  if ((event.seq === 1) !== (event.prev === null)) throw new InvalidRequestError('only the first event of a run has no prev', { reason: 'bad_chain' })
  const { signature, ...unsigned } = event
  const signed = signingBytes(EVENT_SIGNING_DOMAIN, unsigned)
  // the canonical event is the unsigned one plus `,"signature":"..."`
  const size = signed.byteLength - EVENT_SIGNING_DOMAIN_BYTES + ',"signature":'.length + Buffer.byteLength(JSON.stringify(signature))
  if (size > EVENT_MAX_BYTES) throw new InvalidRequestError('event is oversized', { reason: 'oversized' })
  if (!verifyEventSignature(event.executor, signed, signature)) {
    throw new InvalidSignatureError('event signature does not verify with its executor key', { reason: 'bad_signature' })
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

const seqKey = (seq: number): string => seq.toString().padStart(10, '0')
const enc = new TextEncoder()
const dec = new TextDecoder()

/**
 * Durable storage of event logs. Events of runs this node executes are
 * written by the run store in the same batch as the transition; copies of
 * other nodes' events (verified) are kept for serving sync and replay.
 */
export class EventLog {
  private readonly ds: Datastore

  constructor (datastore: Datastore) {
    this.ds = datastore
  }

  static eventKey (runId: string, seq: number): Key {
    return new Key(`/aap/log/${encodeURIComponent(runId)}/${seqKey(seq)}`)
  }

  static correlationKey (correlationId: string, runId: string): Key {
    return new Key(`/aap/corr/${encodeURIComponent(correlationId)}/${encodeURIComponent(runId)}`)
  }

  /** Key prefix of one run's events; the trailing slash keeps run "x:1" from matching "x:10". */
  static runPrefix (runId: string): string {
    return `/aap/log/${encodeURIComponent(runId)}/`
  }

  /** Add an event (and the correlation index) to a batch. */
  static put (batch: Batch, event: AgentEvent): void {
    batch.put(EventLog.eventKey(event.run_id, event.seq), enc.encode(JSON.stringify(event)))
    if (event.seq === 1) batch.put(EventLog.correlationKey(event.correlation_id, event.run_id), enc.encode(''))
  }

  /** Store verified events (of any run) in one batch. */
  async append (events: AgentEvent[]): Promise<void> {
    if (events.length === 0) return
    const batch = this.ds.batch()
    for (const e of events) EventLog.put(batch, e)
    await batch.commit()
  }

  async get (runId: string, seq: number): Promise<AgentEvent | undefined> {
    try {
      return JSON.parse(dec.decode(await this.ds.get(EventLog.eventKey(runId, seq)))) as AgentEvent
    } catch {
      return undefined
    }
  }

  /**
   * Events of a run with seq > afterSeq, ascending, at most `limit`. A run's
   * log is contiguous from seq 1 (the run store writes each next seq, the
   * events service stores only events that extend what it holds), so this
   * reads key by key instead of querying: a query on the memory datastore
   * scans every key the node holds.
   */
  async read (runId: string, afterSeq = 0, limit = SYNC_MAX_EVENTS_PER_RESPONSE): Promise<AgentEvent[]> {
    const out: AgentEvent[] = []
    for (let seq = afterSeq + 1; out.length < limit; seq++) {
      const e = await this.get(runId, seq)
      if (e === undefined) break
      out.push(e)
    }
    return out
  }

  /** The last event of a run, or undefined: gallop to a seq the log lacks, then bisect (the log is contiguous). */
  async head (runId: string): Promise<AgentEvent | undefined> {
    const has = async (seq: number): Promise<boolean> => this.ds.has(EventLog.eventKey(runId, seq))
    if (!await has(1)) return undefined
    let lo = 1
    let hi = 2
    while (await has(hi)) {
      lo = hi
      hi *= 2
    }
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2)
      if (await has(mid)) lo = mid
      else hi = mid
    }
    return this.get(runId, lo)
  }

  /** Run ids this node holds events for under a correlation. */
  async runsOf (correlationId: string): Promise<string[]> {
    const out: string[] = []
    // the trailing slash keeps correlation "task-1" from matching the keys of "task-10"
    const prefix = `/aap/corr/${encodeURIComponent(correlationId)}/`
    for await (const key of this.ds.queryKeys({ prefix })) {
      out.push(decodeURIComponent(key.baseNamespace()))
    }
    return out
  }
}
