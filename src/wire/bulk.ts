/**
 * Bulk transfer over an aap stream protocol: the frames of framing.ts, where an answer may carry one binary
 * frame after its JSON header. The caller writes request frames `{id, type, body}`; the responder answers them
 * in order (the next answer made while one drains, never more than one ahead), each with `{id, ok: true, body,
 * data?: n}` followed (when `data` is set) by one frame of exactly n raw bytes, or with an error frame. Flow
 * control is the caller's: it keeps a bounded number of requests in flight, and the responder refuses a stream
 * that queues more than its limit. Also the content-routing door for the layers above (findProviders): they
 * get peer ids, never addresses.
 */
import type { Connection, PeerId, Stream, StreamMessageEvent, Libp2p } from '@libp2p/interface'
import type { CID } from 'multiformats/cid'
import { DIAL_TIMEOUT_MS, FRAME_ID_MAX, STREAM_IDLE_TIMEOUT_MS } from '../constants.ts'
import { AapError, AgentNotFoundError, InvalidRequestError, reasonOf, TimeoutError, toAapError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { schema } from '../schema/validate.ts'
import { FrameReader } from './bulk-frames.ts'
import { FrameDecoder, FramingError, chunkOf, encodeFrame, errorFrame, errorFromFrame, isFrameId, isRecord, lengthPrefix, parseJson, refusedFrameId, responseEnvelope } from './framing.ts'
import { dialStream } from './dial.ts'
import { heldAnswersOf, type AnswerHolder, type HeldAnswers } from './held-answers.ts'
import { Outbox } from './outbox.ts'
import { closeThenEnd } from './stream-end.ts'
import { untilAborted, withDeadline } from '../util/deadline.ts'
import { allowWindowGrowth } from './yamux-window.ts'
import type { CallContext } from './rpc.ts'

const isRequestEnvelope = schema<{ id: number, type: string, body: Record<string, unknown> }>('aap:common#/definitions/RequestEnvelope')

/** A method's answer: a JSON body and, optionally, bytes sent as the binary frame after it. */
export interface BulkReply {
  body: Record<string, unknown>
  data?: Uint8Array
}

export type BulkMethod = (body: Record<string, unknown>, ctx: CallContext) => Promise<BulkReply>

export interface BulkProtocol {
  protocol: string
  /** Largest request frame. */
  maxRequestBytes: number
  /** Requests a stream may have queued; one more breaks the stream. */
  maxPipelined: number
  maxInboundStreams: number
  handlerTimeoutMs: number
  /** A stream with no request for this long is closed (default STREAM_IDLE_TIMEOUT_MS). */
  idleTimeoutMs?: number
  methods: Record<string, BulkMethod>
  log: Logger
  /** The node's bound on unread answers (default: the one of the node `host` serves for, held-answers.ts). */
  heldAnswers?: HeldAnswers
}

/**
 * One inbound stream: requests answered in order, the next answer made while the one before drains. What it holds
 * for a caller that does not read (a chunk in the stream's buffer, one made ahead) counts against the node's bound
 * on unread answers (held-answers.ts), as the RPC responders' do: strangers' unread chunks could reach a GiB.
 */
class BulkInbound implements AnswerHolder {
  private readonly queue: Uint8Array[] = []
  private readonly frames: FrameDecoder
  private readonly outbox: Outbox
  private readonly ctl = new AbortController()
  private working = false
  /** The next answer, made while the one before drains (it counts against maxPipelined like a queued request). */
  private ahead: Promise<Uint8Array[]> | undefined
  /** Bytes of the answer made ahead, once made (it waits here, not in the outbox). */
  private aheadBytes = 0
  /** When the answer being sent was handed to the stream (undefined while none waits to leave it). */
  private sentAt: number | undefined
  private readonly budget: HeldAnswers
  private remoteEnded = false
  private finished = false
  private idle: ReturnType<typeof setTimeout> | undefined
  private readonly stream: Stream
  private readonly peer: PeerId
  private readonly spec: BulkProtocol
  private readonly idleMs: number
  readonly caller: string
  readonly protocol: string

  constructor (stream: Stream, peer: PeerId, spec: BulkProtocol, budget: HeldAnswers, onClosed: () => void) {
    this.stream = stream
    this.peer = peer
    this.spec = spec
    this.budget = budget
    this.idleMs = spec.idleTimeoutMs ?? STREAM_IDLE_TIMEOUT_MS
    this.caller = peer.toString()
    this.protocol = spec.protocol
    this.frames = new FrameDecoder(spec.maxRequestBytes)
    this.outbox = new Outbox(stream, spec.log)
    this.armIdle()
    stream.addEventListener('close', () => {
      this.finished = true
      clearTimeout(this.idle)
      this.ctl.abort(new AgentNotFoundError('stream closed', { reason: 'closed' }))
      this.queue.length = 0
      this.budget.forget(this)
      onClosed()
    })
    stream.addEventListener('message', (evt: StreamMessageEvent) => { this.onMessage(evt) })
    stream.addEventListener('end', () => {
      this.remoteEnded = true
      this.maybeFinish()
    })
  }

  private armIdle (): void {
    clearTimeout(this.idle)
    this.idle = setTimeout(() => { this.close('idle') }, this.idleMs)
    this.idle.unref?.()
  }

  get heldBytes (): number { return this.outbox.heldBytes + this.aheadBytes }

  get behindMs (): number { return this.sentAt === undefined ? 0 : Date.now() - this.sentAt }

  shed (reason: string): void {
    this.stream.abort(new Error(reason))
  }

  /**
   * Send what is queued and close, all within STREAM_CLOSE_TIMEOUT_MS, else abort: a caller that stopped reading
   * would keep its unread answers (a chunk each) waiting to drain for as long as the connection lives. Then the
   * caller has as long to end its side (stream-end.ts), or the stream and its decoder stay as long as it.
   */
  private close (why: string): void {
    this.finished = true
    void closeThenEnd(this.stream, this.spec.log, why, this.outbox.whenSent())
  }

  private fatal (err: AapError): void {
    if (this.finished) return
    this.spec.log.debug({ peer: this.peer.toString(), protocol: this.spec.protocol, reason: err.details?.reason }, 'a peer broke a bulk stream')
    this.queue.length = 0
    void this.outbox.send(encodeFrame({ id: null, ok: false, error: errorFrame(err) }))
    this.close('broken')
  }

  private maybeFinish (): void {
    if (this.remoteEnded && !this.working && this.queue.length === 0 && !this.finished) this.close('done')
  }

  private onMessage (evt: StreamMessageEvent): void {
    if (this.finished) return
    let list: Uint8Array[]
    try {
      list = this.frames.push(chunkOf(evt))
    } catch (err) {
      const reason = err instanceof FramingError ? err.reason : 'bad_prefix'
      this.fatal(new InvalidRequestError((err as Error).message, { reason, max_frame_bytes: this.spec.maxRequestBytes }))
      return
    }
    // only a whole request counts as use: bytes of a frame that never completes, dripped in, do not keep the
    // stream; nor do requests of a caller that has left an answer unread for longer than the idle limit
    if (list.length > 0 && this.behindMs <= this.idleMs) this.armIdle()
    for (const f of list) this.queue.push(f)
    if (this.queue.length + (this.ahead === undefined ? 0 : 1) > this.spec.maxPipelined) {
      this.fatal(new InvalidRequestError(`more than ${this.spec.maxPipelined} requests waiting on one stream`, { reason: 'too_many_requests', limit: this.spec.maxPipelined }))
      return
    }
    if (!this.working) void this.work()
  }

  /**
   * Answer the queued requests in order. While one answer drains, the next one is made (a chunk read from the
   * store), so the stream does not run dry; the one after only once the draining answer has wholly left the
   * stream's buffer, so at most two are held at once. `answer` never rejects: a failure is its error frame.
   */
  private async work (): Promise<void> {
    this.working = true
    try {
      while (!this.finished) {
        if (this.ahead === undefined) {
          const frame = this.queue.shift()
          if (frame === undefined) break
          this.ahead = this.made(frame)
        }
        const parts = await this.ahead
        this.ahead = undefined
        this.aheadBytes = 0
        if (this.finished) break
        // header and data go out in one outbox turn, so they stay together on the stream
        this.sentAt = Date.now()
        const sent = await Promise.all(parts.map(async p => this.outbox.send(p)))
        if (sent.includes(false)) {
          this.stream.abort(new Error('the caller stopped reading'))
          return
        }
        const following = this.queue.shift()
        if (following !== undefined) this.ahead = this.made(following)
        await this.outbox.whenEmpty()
        this.sentAt = undefined
      }
    } finally {
      this.working = false
    }
    this.maybeFinish()
  }

  /** The answer to one request, counted against the node's bound once made (it is held from then on). */
  private async made (frame: Uint8Array): Promise<Uint8Array[]> {
    const parts = await this.answer(frame)
    if (this.finished) return parts
    this.aheadBytes = parts.reduce((n, p) => n + p.byteLength, 0)
    this.budget.note(this, this.aheadBytes)
    return parts
  }

  /** The frames that answer one request. */
  private async answer (bytes: Uint8Array): Promise<Uint8Array[]> {
    let envelope: unknown
    try {
      envelope = parseJson(bytes)
    } catch (err) {
      return [encodeFrame({ id: refusedFrameId(err), ok: false, error: errorFrame(toAapError(err)) })]
    }
    const id = isRecord(envelope) && isFrameId(envelope.id) ? envelope.id : null
    if (id === null || !isRequestEnvelope(envelope)) {
      return [encodeFrame({ id, ok: false, error: errorFrame(new InvalidRequestError('request frame must be {id, type, body} with an object body', { reason: 'bad_envelope' })) })]
    }
    const m = Object.hasOwn(this.spec.methods, envelope.type) ? this.spec.methods[envelope.type] : undefined
    if (m === undefined) {
      return [encodeFrame({ id, ok: false, error: errorFrame(new InvalidRequestError(`unknown request type "${envelope.type}" on ${this.spec.protocol}`, { reason: 'unknown_type' })) })]
    }
    const limit = this.spec.handlerTimeoutMs
    const deadline = withDeadline(this.ctl.signal, limit)
    const signal = deadline.signal
    const type = envelope.type
    // the method is raced against its limit: one that overruns it (whether or not it heeds the signal) is answered
    // TIMEOUT then, and the requests queued behind it go on. Its late result is dropped (its bytes are only memory);
    // a late failure is logged
    // (called inside a promise: a method that throws at once is a failed answer like any other)
    const running = (async () => await m(envelope.body, { peer: this.peer, signal }))()
    try {
      const reply = await untilAborted(running, signal)
      if (reply.data === undefined) return [encodeFrame({ id, ok: true, body: reply.body })]
      return [encodeFrame({ id, ok: true, body: reply.body, data: reply.data.byteLength }), lengthPrefix(reply.data.byteLength), reply.data]
    } catch (err) {
      const timedOut = signal.aborted && !this.ctl.signal.aborted
      if (signal.aborted) {
        running.catch((late: unknown) => { this.spec.log.debug({ err: late, protocol: this.spec.protocol, type }, 'a bulk request handler failed after it was given up on') })
      }
      const e = timedOut
        ? new TimeoutError(`${type} did not finish within ${limit} ms`, { limit_ms: limit })
        : toAapError(err)
      if (e.code !== 'INTERNAL') {
        try { return [encodeFrame({ id, ok: false, error: errorFrame(e) })] } catch (encodeErr) {
          // details JSON cannot carry (a handler's bug): answered like every internal failure below
          err = encodeErr
        }
      }
      this.spec.log.error({ err, protocol: this.spec.protocol, type: envelope.type }, 'a bulk request handler failed')
      return [encodeFrame({ id, ok: false, error: { code: 'INTERNAL', message: 'internal error' } })]
    } finally {
      deadline.clear()
    }
  }
}

/** Register a bulk protocol. Returns a function that unregisters it and ends its streams. */
export async function serveBulk (host: Pick<Libp2p, 'handle' | 'unhandle'>, spec: BulkProtocol): Promise<() => Promise<void>> {
  const budget = spec.heldAnswers ?? heldAnswersOf(host, spec.log)
  const active = new Set<Stream>()
  await host.handle(spec.protocol, (stream: Stream, connection: Connection) => {
    active.add(stream)
    // eslint-disable-next-line no-new -- the stream's listeners hold it
    new BulkInbound(stream, connection.remotePeer, spec, budget, () => { active.delete(stream) })
  }, { maxInboundStreams: spec.maxInboundStreams })
  return async () => {
    await host.unhandle(spec.protocol)
    for (const s of active) s.abort(new Error('protocol stopped'))
    active.clear()
  }
}

/** An answer as the caller gets it. */
export interface BulkAnswer {
  body: Record<string, unknown>
  data?: Uint8Array
}

interface Waiting {
  resolve: (a: BulkAnswer) => void
  reject: (err: AapError) => void
  type: string
  timeoutMs: number
}

/**
 * One outbound bulk stream to one peer; requests pipelined, answered in order. Only the oldest pending
 * request is timed, from its sending or the answer before it: timed from its sending, the last of a full
 * window of chunks waited for all before it, and a slow link could never fetch a large artifact.
 */
export class BulkSession {
  /** In the order sent, which is the order of the answers. */
  private readonly pending = new Map<number, Waiting>()
  /** The timer of the oldest pending request. */
  private timer: ReturnType<typeof setTimeout> | undefined
  private readonly outbox: Outbox
  private readonly peerName: string
  private nextId = 1
  /** The header of an answer whose binary frame comes next. */
  private expecting: { id: number, body: Record<string, unknown>, bytes: number } | undefined
  private closed = false
  private readonly stream: Stream
  private readonly log: Logger

  private constructor (stream: Stream, peer: PeerId, maxFrameBytes: number, log: Logger) {
    this.stream = stream
    this.log = log
    this.peerName = peer.toString()
    this.outbox = new Outbox(stream, log)
    const reader = new FrameReader(maxFrameBytes)
    stream.addEventListener('close', () => {
      this.closed = true
      this.failAll(new AgentNotFoundError(`stream to agent ${this.peerName} closed before it answered`, { reason: 'closed' }))
    })
    // the responder ended its side (it closed the stream as idle, or broken): nothing more is answered here, so the
    // requests waiting fail now, not at their timeout, and new ones at once (as client.ts's sessions); ours closes too
    stream.addEventListener('end', () => {
      if (this.closed) return
      this.closed = true
      this.failAll(new AgentNotFoundError(`agent ${this.peerName} ended the stream before it answered`, { reason: 'closed' }))
      if (stream.writeStatus === 'writable') void closeThenEnd(stream, log, 'the responder ended its side')
    })
    stream.addEventListener('message', (evt: StreamMessageEvent) => {
      if (this.closed) return
      try {
        reader.push(evt.data, (f) => { this.onFrame(f) })
      } catch (err) {
        this.fatal(new InvalidRequestError(`agent ${this.peerName} sent a bad frame: ${(err as Error).message}`, { reason: 'bad_response' }))
      }
    })
  }

  /** Open a stream of `protocol` to `peer`. */
  static async open (host: Pick<Libp2p, 'dialProtocol'>, peer: PeerId, protocol: string, opts: { maxFrameBytes: number, log: Logger, signal?: AbortSignal }): Promise<BulkSession> {
    const timer = AbortSignal.timeout(DIAL_TIMEOUT_MS)
    const signal = opts.signal === undefined ? timer : AbortSignal.any([opts.signal, timer])
    let stream: Stream
    try {
      stream = await dialStream(host, peer, protocol, { signal, log: opts.log })
    } catch (err) {
      if (timer.aborted) throw new AgentNotFoundError(`agent ${peer.toString()} did not answer the dial within ${DIAL_TIMEOUT_MS} ms`, { reason: 'timeout', timeout: 'dial', limit_ms: DIAL_TIMEOUT_MS }, { cause: err })
      if (opts.signal?.aborted === true) throw new TimeoutError(`dial of agent ${peer.toString()} was aborted by the caller`, { reason: 'aborted' }, { cause: err })
      throw new AgentNotFoundError(`agent ${peer.toString()} is unreachable on ${protocol}: ${reasonOf(err)}`, { reason: 'unreachable' }, { cause: err })
    }
    // what comes back is bounded by this session's own requests: let the window grow while it is read fast
    allowWindowGrowth(stream)
    return new BulkSession(stream, peer, opts.maxFrameBytes, opts.log)
  }

  private onFrame (bytes: Uint8Array): void {
    const head = this.expecting
    if (head !== undefined) {
      this.expecting = undefined
      if (bytes.byteLength !== head.bytes) {
        this.fatal(new InvalidRequestError(`agent ${this.peerName} announced ${head.bytes} bytes and sent ${bytes.byteLength}`, { reason: 'bad_response' }))
        return
      }
      this.settle(head.id, (w) => { w.resolve({ body: head.body, data: bytes }) })
      return
    }
    const res = responseEnvelope(bytes, this.peerName)
    if (res instanceof AapError) {
      this.fatal(res)
      return
    }
    const id = res.id
    if (res.ok === true && isRecord(res.body)) {
      const body = res.body
      if (res.data === undefined) {
        this.settle(id, (w) => { w.resolve({ body }) })
      } else if (typeof res.data === 'number' && Number.isInteger(res.data) && res.data >= 0) {
        this.expecting = { id, body, bytes: res.data }
      } else {
        this.fatal(new InvalidRequestError(`agent ${this.peerName} sent a malformed data length`, { reason: 'bad_response' }))
      }
    } else if (res.ok === false) {
      const err = errorFromFrame(res.error)
      this.settle(id, (w) => { w.reject(err) })
    } else {
      this.fatal(new InvalidRequestError(`agent ${this.peerName} sent a malformed response frame`, { reason: 'bad_response' }))
    }
  }

  private settle (id: number, fn: (w: Waiting) => void): void {
    const w = this.pending.get(id)
    if (w === undefined) return // an answer to a request that already timed out
    const head = this.pending.keys().next().value === id
    this.pending.delete(id)
    if (head) this.timeHead()
    fn(w)
  }

  /** Run the timer of the oldest pending request (none when nothing is pending). */
  private timeHead (): void {
    clearTimeout(this.timer)
    const w = this.pending.values().next().value
    if (w === undefined) return
    this.timer = setTimeout(() => {
      // answers come in order: a late one would be matched to the wrong request, so the stream goes
      this.fatal(new AgentNotFoundError(`agent ${this.peerName} did not answer ${w.type} within ${w.timeoutMs} ms of its turn`, { reason: 'timeout', timeout: 'response', limit_ms: w.timeoutMs }))
    }, w.timeoutMs)
  }

  private failAll (err: AapError): void {
    clearTimeout(this.timer)
    for (const w of this.pending.values()) w.reject(err)
    this.pending.clear()
  }

  private fatal (err: AapError): void {
    this.closed = true
    this.failAll(err)
    this.stream.abort(err)
  }

  /** Requests sent and not yet answered. */
  get inFlight (): number { return this.pending.size }

  /** Send one request; resolves with its answer (and bytes) within `timeoutMs` of its sending or the answer before it. */
  async request (type: string, body: object, timeoutMs: number): Promise<BulkAnswer> {
    if (this.closed || this.stream.writeStatus !== 'writable') throw new AgentNotFoundError(`stream to agent ${this.peerName} is closed`, { reason: 'closed' })
    const id = this.nextId++
    if (this.nextId > FRAME_ID_MAX) this.nextId = 1
    const { promise, resolve, reject } = Promise.withResolvers<BulkAnswer>()
    this.pending.set(id, { resolve, reject, type, timeoutMs })
    if (this.pending.size === 1) this.timeHead()
    void this.outbox.send(encodeFrame({ id, type, body })).then((sent) => {
      if (!sent) this.fatal(new AgentNotFoundError(`stream to agent ${this.peerName} closed before the request was sent`, { reason: 'closed' }))
    })
    return promise
  }

  /**
   * End the stream: gracefully when nothing is pending, else at once. Gracefully, the responder then has
   * STREAM_CLOSE_TIMEOUT_MS to end its side (stream-end.ts), or the stream and its reader stay as long as it.
   */
  async close (): Promise<void> {
    if (this.closed) return
    this.closed = true
    if (this.pending.size > 0) {
      this.failAll(new AgentNotFoundError('the session was closed', { reason: 'closed' }))
      this.stream.abort(new Error('session closed with requests pending'))
      return
    }
    await closeThenEnd(this.stream, this.log, 'session closed')
  }

  abort (err: Error): void {
    this.closed = true
    this.failAll(toAapError(err))
    this.stream.abort(err)
  }
}

/** Peers the DHT names as holders of `cid` (at most `max`, never this node). */
export async function findProviders (host: Pick<Libp2p, 'contentRouting' | 'peerId'>, cid: CID, max: number, signal: AbortSignal): Promise<PeerId[]> {
  const out: PeerId[] = []
  const seen = new Set<string>()
  for await (const info of host.contentRouting.findProviders(cid, { signal })) {
    const key = info.id.toString()
    if (info.id.equals(host.peerId) || seen.has(key)) continue
    seen.add(key)
    out.push(info.id)
    if (out.length >= max) break
  }
  return out
}
