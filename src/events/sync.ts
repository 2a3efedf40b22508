/**
 * /aap/events/0.1.0: any node that holds a run's events serves them; the
 * receiver trusts none of it until every event verifies against its
 * executor's key and chains onto what the receiver already holds.
 *
 * Two methods, both answered with a SyncResponse page `{ events, more }`:
 *  - `run`:         events of one run with seq > after_seq;
 *  - `correlation`: events of every run of a correlation, by run_id then seq,
 *                   resumable after any (run_id, seq).
 * Pages are bounded by count (SYNC_MAX_EVENTS_PER_RESPONSE) and by bytes
 * (SYNC_MAX_RESPONSE_BYTES), so one 48 KiB-event run never overflows a frame.
 */
import type { PeerId } from '@libp2p/interface'
import {
  EVENTS_MAX_EVENTS_PER_RUN, EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL, SYNC_MAX_EVENTS_PER_RESPONSE,
  SYNC_MAX_PAGES, SYNC_MAX_RESPONSE_BYTES, SYNC_TIMEOUT_MS, SYNC_TOTAL_TIMEOUT_MS
} from '../constants.ts'
import { AapError, InvalidRequestError, TimeoutError, toAapError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { schema } from '../schema/validate.ts'
import { RpcClient, method, serve } from '../wire/rpc.ts'
import type { MeshHost } from '../wire/host.ts'
import type { AgentEvent } from '../runlog/types.ts'
import { checkChain, verifyEvent, type SignatureCache } from '../runlog/event.ts'
import { type EventLog } from '../runlog/event-log.ts'
import { isVerdict } from '../runlog/verdict-shape.ts'

export interface SyncRunRequest { run_id: string, after_seq?: number, limit?: number }
export interface SyncCorrelationRequest { correlation_id: string, after_run?: string, after_seq?: number, limit?: number }
export interface SyncResponse { events: AgentEvent[], more: boolean }

export const isSyncRunRequest = schema<SyncRunRequest>('aap:events#/definitions/SyncRunRequest')
export const isSyncCorrelationRequest = schema<SyncCorrelationRequest>('aap:events#/definitions/SyncCorrelationRequest')
export const isSyncResponse = schema<SyncResponse>('aap:events#/definitions/SyncResponse')

// ---- responder -------------------------------------------------------------------------

/** Fills one page: stops at `limit` events or SYNC_MAX_RESPONSE_BYTES, whichever comes first. */
class Page {
  readonly events: AgentEvent[] = []
  private bytes = 0
  more = false
  private readonly limit: number

  constructor (limit: number | undefined) {
    this.limit = Math.min(limit ?? SYNC_MAX_EVENTS_PER_RESPONSE, SYNC_MAX_EVENTS_PER_RESPONSE)
  }

  /** False (and `more` set) when the event does not fit: the page is full. */
  add (e: AgentEvent): boolean {
    const size = Buffer.byteLength(JSON.stringify(e))
    if (this.events.length >= this.limit || (this.events.length > 0 && this.bytes + size > SYNC_MAX_RESPONSE_BYTES)) {
      this.more = true
      return false
    }
    this.events.push(e)
    this.bytes += size
    return true
  }

  get room (): number {
    return this.limit - this.events.length
  }

  body (): SyncResponse {
    return { events: this.events, more: this.more }
  }
}

export async function runPage (log: EventLog, req: SyncRunRequest): Promise<SyncResponse> {
  const page = new Page(req.limit)
  const events = await log.read(req.run_id, req.after_seq ?? 0, page.room + 1)
  for (const e of events) if (!page.add(e)) break
  return page.body()
}

export async function correlationPage (log: EventLog, req: SyncCorrelationRequest): Promise<SyncResponse> {
  const page = new Page(req.limit)
  const runs = (await log.runsOf(req.correlation_id)).sort()
  for (const runId of runs) {
    let after = 0
    if (req.after_run !== undefined) {
      if (runId < req.after_run) continue
      if (runId === req.after_run) after = req.after_seq ?? 0
    }
    const events = await log.read(runId, after, page.room + 1)
    for (const e of events) {
      if (e.correlation_id !== req.correlation_id) break
      if (!page.add(e)) return page.body()
    }
  }
  return page.body()
}

/**
 * Register the sync responder on the host. Returns the function that
 * unregisters it. `beforeRead`, when given, is awaited before each page is
 * read (the events service writes what it has placed first); it does not
 * throw.
 */
export async function serveSync (host: MeshHost, log: EventLog, beforeRead?: () => Promise<void>, logger?: Logger): Promise<() => Promise<void>> {
  const ready = async (): Promise<void> => { await beforeRead?.() }
  return serve(host, {
    protocol: EVENTS_SYNC_PROTOCOL,
    maxFrameBytes: EVENTS_SYNC_MAX_FRAME_BYTES,
    ...(logger === undefined ? {} : { log: logger }),
    methods: {
      run: method(isSyncRunRequest, async (req) => { await ready(); return runPage(log, req) }),
      correlation: method(isSyncCorrelationRequest, async (req) => { await ready(); return correlationPage(log, req) })
    }
  })
}

// ---- receiver --------------------------------------------------------------------------

export interface SyncCallOptions {
  /** Per page, from request to answer (default SYNC_TIMEOUT_MS). */
  timeoutMs?: number
  /** All pages together (default SYNC_TOTAL_TIMEOUT_MS). */
  totalTimeoutMs?: number
  signal?: AbortSignal
  /**
   * Each page's verified, chained events, handed on (in order, one run's
   * stretch at a time) as they come instead of kept for the result: a peer's
   * answer then takes at most one page of memory here, not SYNC_MAX_PAGES of
   * them. What earlier pages handed on stays handed on when a later page
   * fails.
   */
  sink?: (events: AgentEvent[]) => Promise<void>
}

/**
 * A slow or silent responder is a TIMEOUT for the caller, whatever layer
 * noticed it; an unreachable one stays AGENT_NOT_FOUND.
 */
function asSyncError (err: unknown, peer: string): AapError {
  const e = toAapError(err)
  const d = e.details
  if (e.code === 'AGENT_NOT_FOUND' && d?.reason === 'timeout' && d.timeout !== 'dial') {
    return new TimeoutError(`sync peer ${peer} did not answer in time`, { reason: 'stalled', peer }, { cause: err })
  }
  return e
}

function lie (peer: string, message: string, reason: string): InvalidRequestError {
  return new InvalidRequestError(`sync peer ${peer}: ${message}`, { reason, peer })
}

/** Signature, attribution, size and shape of every event of a page; the first failure names the peer. */
async function verifyAll (events: unknown[], peer: string, signatures: SignatureCache): Promise<AgentEvent[]> {
  const out: AgentEvent[] = []
  for (const raw of events) {
    try {
      out.push(await verifyEvent(raw, signatures))
    } catch (err) {
      const e = toAapError(err)
      throw new AapError(e.code, `sync peer ${peer} sent a bad event: ${e.message}`, { ...e.details, peer })
    }
  }
  return out
}

/** The first event answered after the event a verdict followed: at the verdict's seq, after the same predecessor. */
function checkInPlaceOf (e: AgentEvent, verdict: AgentEvent): void {
  if (e.seq !== verdict.seq) throw new InvalidRequestError(`event seq ${e.seq} where ${verdict.seq} was expected`, { reason: 'gap' })
  if (e.prev !== verdict.prev || e.correlation_id !== verdict.correlation_id) {
    throw new InvalidRequestError(`event ${e.run_id}#${e.seq} does not chain to the predecessor of the verdict held`, { reason: 'bad_chain' })
  }
}

/**
 * Pulls events from peers and verifies them. Every method either returns
 * events that verify and chain, or throws a typed error: INVALID_SIGNATURE
 * (forged or misattributed event), INVALID_REQUEST (broken chain, gap,
 * events nobody asked for, a page that claims more but carries nothing),
 * TIMEOUT (a stalling peer), AGENT_NOT_FOUND (unreachable).
 */
export class SyncClient {
  private readonly rpc: RpcClient
  private readonly signatures: SignatureCache

  constructor (host: MeshHost, signatures: SignatureCache, log?: Logger) {
    this.signatures = signatures
    this.rpc = new RpcClient(host, { protocol: EVENTS_SYNC_PROTOCOL, maxFrameBytes: EVENTS_SYNC_MAX_FRAME_BYTES, ...(log === undefined ? {} : { log }) })
  }

  close (): void {
    this.rpc.close()
  }

  private async page (peer: PeerId, type: 'run' | 'correlation', body: object, deadline: AbortSignal, opts: SyncCallOptions): Promise<SyncResponse> {
    const name = peer.toString()
    const timeoutMs = opts.timeoutMs ?? SYNC_TIMEOUT_MS
    let res: Record<string, unknown>
    try {
      res = await this.rpc.call(peer, type, body, { signal: deadline, responseTimeoutMs: timeoutMs, callTimeoutMs: timeoutMs })
    } catch (err) {
      if (deadline.aborted) throw new TimeoutError(`sync with ${name} ran over its total time`, { reason: 'stalled', peer: name }, { cause: err })
      throw asSyncError(err, name)
    }
    if (!isSyncResponse(res)) throw lie(name, 'answered with something that is not a SyncResponse', 'bad_response')
    return res
  }

  private deadline (opts: SyncCallOptions): AbortSignal {
    const total = AbortSignal.timeout(opts.totalTimeoutMs ?? SYNC_TOTAL_TIMEOUT_MS)
    return opts.signal === undefined ? total : AbortSignal.any([opts.signal, total])
  }

  /**
   * Events of `runId` after `head` (or from seq 1), every page, verified and
   * chained onto `head`; a liveness verdict as `head` is asked for again, with
   * what follows it, since the executor's own event there replaces it. Stops
   * at EVENTS_MAX_EVENTS_PER_RUN.
   */
  async run (peer: PeerId, runId: string, head: AgentEvent | undefined, opts: SyncCallOptions = {}): Promise<AgentEvent[]> {
    const name = peer.toString()
    const deadline = this.deadline(opts)
    const out: AgentEvent[] = []
    let last = head
    // a liveness verdict held as the head: the executor's own event at its seq replaces it (protocols/liveness.md),
    // so the log is asked from the event before it, and the first event answered must follow that one as the verdict did
    let verdict = head !== undefined && isVerdict(head) ? head : undefined
    for (let pages = 0; pages < SYNC_MAX_PAGES; pages++) {
      const after = verdict === undefined ? last?.seq ?? 0 : verdict.seq - 1
      const res = await this.page(peer, 'run', { run_id: runId, after_seq: after }, deadline, opts)
      const events = await verifyAll(res.events, name, this.signatures)
      for (const e of events) {
        if (e.run_id !== runId) throw lie(name, `answered for run ${runId} with an event of ${e.run_id}`, 'unrequested')
      }
      try {
        const first = events[0]
        if (verdict === undefined) checkChain(events, last)
        else if (first !== undefined) {
          checkInPlaceOf(first, verdict)
          checkChain(events.slice(1), first)
          verdict = undefined
        }
      } catch (err) {
        const e = toAapError(err)
        throw lie(name, e.message, String(e.details?.reason ?? 'bad_chain'))
      }
      if (opts.sink === undefined) out.push(...events)
      else if (events.length > 0) await opts.sink(events)
      last = events.at(-1) ?? last
      if (!res.more) return out
      if (events.length === 0) throw lie(name, 'claims more events but sent none', 'stall')
      if ((last?.seq ?? 0) >= EVENTS_MAX_EVENTS_PER_RUN) return out
    }
    throw lie(name, `still had more after ${SYNC_MAX_PAGES} pages`, 'stall')
  }

  /**
   * The one event of `runId` at `seq`, verified (its signature and place, not
   * its chain: a handoff receiver needs the executor's signed word, not the
   * log before it). One page; undefined when the peer holds no event there.
   */
  async eventAt (peer: PeerId, runId: string, seq: number, opts: SyncCallOptions = {}): Promise<AgentEvent | undefined> {
    const name = peer.toString()
    // one event asked for, so the responder reads and sends one, not a page of up to SYNC_MAX_EVENTS_PER_RESPONSE
    const res = await this.page(peer, 'run', { run_id: runId, after_seq: seq - 1, limit: 1 }, this.deadline(opts), opts)
    // only the first event of the page is wanted: the rest is neither checked nor kept
    const e = (await verifyAll(res.events.slice(0, 1), name, this.signatures))[0]
    if (e !== undefined && (e.run_id !== runId || e.seq !== seq)) throw lie(name, `answered for ${runId} at seq ${seq} with ${e.run_id} at seq ${e.seq}`, 'unrequested')
    return e
  }

  /**
   * Every run of a correlation the peer holds, each from seq 1, verified and
   * chained. Returns run_id -> events (ascending).
   */
  async correlation (peer: PeerId, correlationId: string, opts: SyncCallOptions = {}): Promise<Map<string, AgentEvent[]>> {
    const name = peer.toString()
    const deadline = this.deadline(opts)
    const out = new Map<string, AgentEvent[]>()
    let cursor: AgentEvent | undefined
    for (let pages = 0; pages < SYNC_MAX_PAGES; pages++) {
      const body = cursor === undefined
        ? { correlation_id: correlationId }
        : { correlation_id: correlationId, after_run: cursor.run_id, after_seq: cursor.seq }
      const res = await this.page(peer, 'correlation', body, deadline, opts)
      const events = await verifyAll(res.events, name, this.signatures)
      for (const e of events) {
        if (e.correlation_id !== correlationId) throw lie(name, `answered for ${correlationId} with an event of ${e.correlation_id}`, 'unrequested')
        // runs come in ascending id order, each run's events in one stretch
        const head = cursor !== undefined && cursor.run_id === e.run_id ? cursor : undefined
        if (cursor !== undefined && e.run_id < cursor.run_id) throw lie(name, 'sent runs out of order', 'bad_order')
        try {
          checkChain([e], head)
        } catch (err) {
          const ae = toAapError(err)
          throw lie(name, ae.message, String(ae.details?.reason ?? 'bad_chain'))
        }
        let list = out.get(e.run_id)
        if (list === undefined) {
          list = []
          out.set(e.run_id, list)
        }
        list.push(e)
        cursor = e
      }
      if (opts.sink !== undefined) {
        for (const list of out.values()) await opts.sink(list)
        out.clear()
      }
      if (!res.more) return out
      if (events.length === 0) throw lie(name, 'claims more events but sent none', 'stall')
    }
    throw lie(name, `still had more after ${SYNC_MAX_PAGES} pages`, 'stall')
  }
}
