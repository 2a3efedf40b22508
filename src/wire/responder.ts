/**
 * The answering side of an aap stream protocol. Each inbound stream is read
 * frame by frame; requests run at most MAX_PIPELINED_REQUESTS_PER_STREAM at
 * once (the stream is paused while that many are in progress), each answered
 * with its result or a typed error frame. A stream whose framing is lost gets
 * one stream-level error frame (id null) and is closed once the requests
 * already read have their answers.
 */
import type { Connection, PeerId, Stream, StreamMessageEvent } from '@libp2p/interface'
import {
  FRAME_COMPLETION_TIMEOUT_MS, HANDLER_TIMEOUT_MS, MAX_INBOUND_STREAMS_PER_PROTOCOL, MAX_OUTBOUND_STREAMS_PER_PROTOCOL,
  MAX_PIPELINED_REQUESTS_PER_STREAM, RESPONSE_TIMEOUT_MS, STREAM_IDLE_TIMEOUT_MS
} from '../constants.ts'
import { AapError, AgentNotFoundError, InvalidRequestError, TimeoutError, toAapError } from '../errors.ts'
import { componentLogger, type Logger } from '../logger.ts'
import { schema } from '../schema/validate.ts'
import { FrameDecoder, chunkOf, encodeFrame, errorFrame, frameBodyBytes, isFrameId, isRecord, parseJson, refusedFrameId } from './framing.ts'
import { heldAnswersOf, type AnswerHolder, type HeldAnswers } from './held-answers.ts'
import { watchRequests } from './in-flight.ts'
import { RESPONDER_BACKLOG_MAX_BYTES, RESPONDER_FRAME_MIN_COST_BYTES, RESPONDER_HELD_ANSWER_MAX_BYTES } from './network-constants.ts'
import { Outbox } from './outbox.ts'
import type { RpcHost, RpcMethod, RpcProtocol } from './rpc.ts'
import { closeThenEnd } from './stream-end.ts'

const isRequestEnvelope = schema<{ id: number, type: string, body: Record<string, unknown> }>('aap:common#/definitions/RequestEnvelope')

interface Limits {
  handlerTimeoutMs: number
  frameTimeoutMs: number
}

/** One inbound stream of a served protocol. */
class InboundStream implements AnswerHolder {
  private readonly stream: Stream
  private readonly peer: PeerId
  private readonly spec: RpcProtocol
  private readonly limits: Limits
  private readonly log: Logger
  private frames: FrameDecoder
  private readonly outbox: Outbox
  /** The node's bound on unread answers, over all its streams. */
  private readonly budget: HeldAnswers
  /** Controllers of the requests in progress, aborted when the stream closes. */
  private readonly running = new Set<AbortController>()
  /** Complete frames read but not yet handled (from `backlogAt` on): one chunk of bytes can hold many requests. */
  private backlog: Uint8Array[] = []
  private backlogAt = 0
  /** What the backlog costs (RESPONDER_FRAME_MIN_COST_BYTES per frame at least), bounded by RESPONDER_BACKLOG_MAX_BYTES. */
  private backlogCost = 0
  /** No more requests will be read: the caller ended its side, or framing was lost. */
  private remoteEnded = false
  /** Reading stopped because framing was lost. */
  private broken = false
  private finished = false
  /** The stream closed (ended both ways, aborted or reset): nothing more is sent on it, or counted as held for it. */
  private closed = false
  private idle: ReturnType<typeof setTimeout> | undefined
  private partial: ReturnType<typeof setTimeout> | undefined

  constructor (stream: Stream, peer: PeerId, spec: RpcProtocol, limits: Limits, log: Logger, budget: HeldAnswers, onClosed: () => void) {
    this.stream = stream
    this.peer = peer
    this.budget = budget
    this.spec = spec
    this.limits = limits
    this.log = log
    this.frames = new FrameDecoder(spec.maxFrameBytes)
    // answers wait for the caller to read them: requests behind them are read once they are out
    this.outbox = new Outbox(stream, log, () => {
      this.pump()
      this.maybeFinish()
    })
    // the connection budget does not close a connection while a request on it is being handled; requests that
    // wait only for the caller to read its answers are not (it could keep its connection that way for ever)
    watchRequests(stream, () => this.running.size > 0 || (this.backlogged > 0 && !this.callerBehind()))
    this.armIdle()
    stream.addEventListener('close', () => {
      this.finished = true
      this.closed = true
      clearTimeout(this.idle)
      clearTimeout(this.partial)
      for (const c of this.running) c.abort(new AgentNotFoundError('stream closed', { reason: 'closed' }))
      this.running.clear()
      this.dropBacklog()
      this.budget.forget(this)
      onClosed()
    })
    stream.addEventListener('message', (evt: StreamMessageEvent) => { this.onMessage(evt) })
    stream.addEventListener('end', () => { this.onEnd() })
  }

  /**
   * A stream with no request for twice STREAM_IDLE_TIMEOUT_MS is closed. It
   * handles nothing more: a request that comes after could not be answered
   * (our side is closed), and the caller learns it from the end of the stream.
   */
  private armIdle (): void {
    clearTimeout(this.idle)
    this.idle = setTimeout(() => {
      this.finished = true
      this.close('idle')
    }, STREAM_IDLE_TIMEOUT_MS * 2)
    this.idle.unref?.()
  }

  /** Close gracefully within STREAM_CLOSE_TIMEOUT_MS, else abort; then the caller has as long to end its side (stream-end.ts). */
  private close (why: string): void {
    if (this.stream.status !== 'open') return
    void closeThenEnd(this.stream, this.log, why)
  }

  /** Resolves true once the frame is handed to the stream (false: the peer went away; nothing to tell). */
  private async reply (value: unknown): Promise<boolean> {
    // a closed stream sends nothing, and noting an answer for it would count it again after forget()
    if (this.closed) return false
    let frame: Uint8Array
    try { frame = encodeFrame(value) } catch (err) {
      // an answer JSON cannot carry (a handler's bug): the caller is told, and the node goes on
      this.log.error({ err, protocol: this.spec.protocol }, 'an answer could not be encoded')
      frame = encodeFrame({ id: isRecord(value) && isFrameId(value.id) ? value.id : null, ok: false, error: { code: 'INTERNAL', message: 'internal error' } })
    }
    // the limit is on the body's length N, as the caller's decoder reads it (not on the prefix before it)
    const bytes = frameBodyBytes(frame)
    if (bytes > this.spec.maxFrameBytes) {
      // no caller reads a frame past the protocol's limit (and hasRoom counts each answer at most that): say so instead
      const id = isRecord(value) && isFrameId(value.id) ? value.id : null
      this.log.error({ protocol: this.spec.protocol, bytes, max_bytes: this.spec.maxFrameBytes }, 'an answer past the protocol\'s frame limit was not sent')
      const err = new AapError('INTERNAL', `the answer (${bytes} bytes) is past the protocol's frame limit`, { reason: 'answer_oversized', max_bytes: this.spec.maxFrameBytes })
      frame = encodeFrame({ id, ok: false, error: errorFrame(err) })
    }
    const sent = this.outbox.send(frame)
    this.budget.note(this, frame.byteLength)
    return sent
  }

  get heldBytes (): number {
    return this.outbox.heldBytes
  }

  get behindMs (): number {
    return this.outbox.waitingFor()
  }

  get gone (): boolean {
    return this.closed || streamGone(this.stream)
  }

  shed (reason: string): void {
    this.stream.abort(new Error(reason))
  }

  get caller (): string {
    return this.peer.toString()
  }

  get protocol (): string {
    return this.spec.protocol
  }

  /** Framing is lost: say why (no request id can be known), read nothing more, and close once answered. */
  private fatal (err: AapError): void {
    if (this.finished || this.broken) return
    this.broken = true
    this.remoteEnded = true
    clearTimeout(this.partial)
    // nothing more is read: the partial frame's buffer (up to the protocol's frame limit) goes now
    this.frames = new FrameDecoder(this.spec.maxFrameBytes)
    this.log.debug({ peer: this.peer.toString(), protocol: this.spec.protocol, reason: err.details?.reason }, 'a peer broke the framing of a stream')
    void this.reply({ id: null, ok: false, error: errorFrame(err) }).then((sent) => {
      if (sent) this.maybeFinish()
      else this.stream.abort(err)
    })
  }

  /**
   * Once the caller has closed its side and every answer is out, close ours:
   * when the stream's write buffer is empty, not at its first drain (a large
   * answer read slowly is still mostly buffered then, and the close's own
   * STREAM_CLOSE_TIMEOUT_MS would reset it). A caller that has not read its
   * answers RESPONSE_TIMEOUT_MS on would not take them as a call's answer any
   * more: the stream is then aborted.
   */
  private maybeFinish (): void {
    if (!this.remoteEnded || this.running.size > 0 || this.backlogged > 0 || this.finished) return
    this.finished = true
    const unread = setTimeout(() => {
      this.log.debug({ peer: this.peer.toString(), protocol: this.spec.protocol, bytes: this.outbox.heldBytes }, 'a caller that ended its side did not read its answers in time')
      this.stream.abort(new Error(`answers not read within ${RESPONSE_TIMEOUT_MS} ms`))
    }, RESPONSE_TIMEOUT_MS)
    unread.unref?.()
    this.outbox.whenEmpty().then(() => {
      clearTimeout(unread)
      this.close('done')
    }, (err: unknown) => {
      clearTimeout(unread)
      this.log.debug({ err }, 'answers could not be sent before the stream closed')
      this.stream.abort(new Error('answers could not be sent'))
    })
  }

  private handleFrame (bytes: Uint8Array): void {
    let envelope: unknown
    try {
      envelope = parseJson(bytes)
    } catch (err) {
      void this.reply({ id: refusedFrameId(err), ok: false, error: errorFrame(toAapError(err)) })
      return
    }
    const id = isRecord(envelope) && isFrameId(envelope.id) ? envelope.id : null
    if (id === null || !isRequestEnvelope(envelope)) {
      void this.reply({ id, ok: false, error: errorFrame(new InvalidRequestError('request frame must be {id, type, body} with an object body', { reason: 'bad_envelope' })) })
      return
    }
    const methods = this.spec.methods
    const m = Object.hasOwn(methods, envelope.type) ? methods[envelope.type] : undefined
    if (m === undefined) {
      void this.reply({ id, ok: false, error: errorFrame(new InvalidRequestError(`unknown request type "${envelope.type}" on ${this.spec.protocol}`, { reason: 'unknown_type' })) })
      return
    }
    this.call(m, id, envelope.type, envelope.body)
  }

  /** Run one request and answer it exactly once: its result, its typed error, or TIMEOUT. */
  private call (m: RpcMethod, id: number, type: string, body: Record<string, unknown>): void {
    const ctl = new AbortController()
    this.running.add(ctl)
    const limit = this.limits.handlerTimeoutMs
    let answered = false
    const done = (): void => {
      clearTimeout(timer)
      this.running.delete(ctl)
      this.pump()
      this.maybeFinish()
    }
    // each answer is handed to the stream (synchronously, in reply) before done() may close it
    const timer = setTimeout(() => {
      if (answered) return
      answered = true
      ctl.abort(new TimeoutError(`handler exceeded ${limit} ms`))
      void this.reply({ id, ok: false, error: { code: 'TIMEOUT', message: `${type} did not finish within ${limit} ms`, details: { limit_ms: limit } } })
      done()
    }, limit)
    // the stream's close aborts the request: its timer goes with it (nothing can be answered any more)
    ctl.signal.addEventListener('abort', () => { clearTimeout(timer) }, { once: true })
    m.handle(body, { peer: this.peer, signal: ctl.signal }).then(async (result) => {
      if (answered || ctl.signal.aborted) {
        m.settled?.(result, false)
        return
      }
      answered = true
      const sent = this.reply({ id, ok: true, body: result })
      done()
      m.settled?.(result, await sent)
    }, (err: unknown) => {
      if (answered) return
      answered = true
      const e = toAapError(err)
      if (this.closed) {
        // no one is left to tell: the failure of a request whose stream closed goes to the log only
        this.log.debug({ err, protocol: this.spec.protocol, type, code: e.code }, 'a request ended with its stream')
        done()
        return
      }
      if (e.code === 'INTERNAL') {
        // an internal failure is the node's own: logged here, and the peer learns only that it happened
        // (a handler that gave up because its stream closed is no fault of the node's)
        if (ctl.signal.aborted) this.log.debug({ err, protocol: this.spec.protocol, type }, 'a request ended with its stream')
        else this.log.error({ err, protocol: this.spec.protocol, type }, 'a request handler failed')
        void this.reply({ id, ok: false, error: { code: 'INTERNAL', message: 'internal error' } })
      } else {
        void this.reply({ id, ok: false, error: errorFrame(e) })
      }
      done()
    })
  }

  /**
   * Handle backlogged frames while there is room; read more only when the
   * backlog is empty. A caller that does not read its answers gets no more
   * handled (and nothing more read) until they drain: what it asks for stays
   * unread in its own send window, not queued here as answers.
   */
  private pump (): void {
    // at most MAX_PIPELINED_REQUESTS_PER_STREAM frames a pass: frames that are no requests (each answered with an
    // error at once) are not counted in `running`, and a chunk can hold a hundred thousand empty ones; the rest
    // waits for the turn after this pass's answers were handed to the stream, which may then say it is full.
    // No handler starts that could take the answers held past their bound (hasRoom)
    let pass = 0
    while (this.backlogged > 0 && this.running.size < MAX_PIPELINED_REQUESTS_PER_STREAM && !this.finished && !this.outbox.waiting) {
      if (pass++ === MAX_PIPELINED_REQUESTS_PER_STREAM) {
        this.pumpLater()
        break
      }
      if (!this.hasRoom()) {
        this.watchRoom()
        break
      }
      const next = this.backlog[this.backlogAt]!
      this.backlogAt++
      this.backlogCost -= frameCost(next)
      if (this.backlogAt === this.backlog.length) this.dropBacklog()
      this.handleFrame(next)
    }
    const held = this.callerBehind()
    const full = this.backlogged > 0 || this.running.size >= MAX_PIPELINED_REQUESTS_PER_STREAM || held
    if (full && this.stream.readStatus === 'readable') this.stream.pause()
    else if (!full && this.stream.readStatus === 'paused') this.stream.resume()
    // told once each time the answers start waiting for the caller (the reads may have been held already for a backlog)
    if (held && !this.heldTold) this.spec.onReadsHeld?.(this.peer)
    this.heldTold = held
    this.armPartial()
  }

  /** onReadsHeld was called for the answers waiting now. */
  private heldTold = false
  private roomWatched = false

  /**
   * Whether one more request may be handled: the answers held for the
   * stream, with one answer as large as the protocol's frame limit (reply
   * sends none larger) for each request in progress and the next, stay within
   * RESPONDER_HELD_ANSWER_MAX_BYTES. With nothing held and nothing running one
   * always may, whatever the limit.
   */
  private hasRoom (): boolean {
    const held = this.outbox.heldBytes
    if (held === 0 && this.running.size === 0) return true
    return held + (this.running.size + 1) * this.spec.maxFrameBytes <= RESPONDER_HELD_ANSWER_MAX_BYTES
  }

  /**
   * The backlog waits for the caller to read answers (the outbox waits for a
   * drain, or what is held leaves no room), not for work of this node's.
   */
  private callerBehind (): boolean {
    return this.outbox.waiting || (this.backlogged > 0 && this.running.size === 0 && this.outbox.heldBytes > 0 && !this.hasRoom())
  }

  /** Pump again once the stream has passed some of what it holds on (its 'drain'; 'idle' when it is empty). */
  private watchRoom (): void {
    if (this.roomWatched) return
    this.roomWatched = true
    const stream = this.stream
    const wake = (): void => {
      stream.removeEventListener('drain', wake)
      stream.removeEventListener('idle', wake)
      stream.removeEventListener('close', wake)
      // the stream's own drain listener sends from its buffer in a microtask queued before this one
      queueMicrotask(() => {
        this.roomWatched = false
        this.pump()
        this.maybeFinish()
      })
    }
    stream.addEventListener('drain', wake)
    stream.addEventListener('idle', wake)
    stream.addEventListener('close', wake)
  }

  /** Frames read and not handled yet. */
  private dropBacklog (): void {
    this.backlog = []
    this.backlogAt = 0
    this.backlogCost = 0
  }

  private get backlogged (): number {
    return this.backlog.length - this.backlogAt
  }

  private pumpLaterArmed = false
  /** Go on with the backlog in a later turn (the outbox flushes this pass's answers first). */
  private pumpLater (): void {
    if (this.pumpLaterArmed) return
    this.pumpLaterArmed = true
    setImmediate(() => {
      this.pumpLaterArmed = false
      this.pump()
      this.maybeFinish()
    })
  }

  /**
   * A frame that has started must finish within frameTimeoutMs, or the peer
   * holds a buffer here for nothing. Not while this side holds its reads and
   * something waits unread in the stream's own buffer (it may be the rest of
   * the frame): while nothing does, the peer simply has not sent the rest,
   * and the timer runs on. The timer is one frame's: onMessage stops it when
   * a frame completes, and the one that starts after it gets its own time.
   */
  private armPartial (): void {
    if (this.frames.buffered === 0 || this.finished || this.broken || this.unreadHeld()) {
      clearTimeout(this.partial)
      this.partial = undefined
      return
    }
    this.partial ??= setTimeout(() => {
      this.partial = undefined
      // bytes that came while the reads were held may finish the frame: it gets its time again once they are read
      if (this.unreadHeld()) return
      this.truncated()
    }, this.limits.frameTimeoutMs)
  }

  /** This side holds its reads and bytes wait unread in the stream's buffer. */
  private unreadHeld (): boolean {
    return this.stream.readStatus !== 'readable' && this.stream.readBufferLength > 0
  }

  /**
   * The frame did not complete in time. A caller whose answers wait for it to
   * read would not read the error frame either (its reads are held, so the
   * requests behind would never be answered and the stream never close):
   * its stream is cut at once.
   */
  private truncated (): void {
    const err = new InvalidRequestError(`truncated frame: ${this.frames.buffered} bytes and no end within ${this.limits.frameTimeoutMs} ms`, { reason: 'truncated' })
    if (!this.callerBehind()) {
      this.fatal(err)
      return
    }
    this.log.debug({ peer: this.peer.toString(), protocol: this.spec.protocol, bytes: this.frames.buffered }, 'a caller that does not read its answers left a frame unfinished')
    this.stream.abort(err)
  }

  private onMessage (evt: StreamMessageEvent): void {
    if (this.finished || this.broken) return
    this.armIdle()
    const { frames: list, error } = this.frames.read(chunkOf(evt))
    for (const f of list) {
      this.backlog.push(f)
      this.backlogCost += frameCost(f)
    }
    if (this.backlogCost > RESPONDER_BACKLOG_MAX_BYTES) {
      // no honest caller piles up this much unhandled: what it sent is dropped, and the stream with it
      const frames = this.backlogged
      this.dropBacklog()
      this.fatal(new InvalidRequestError(`${frames} requests read and not yet handled cost over ${RESPONDER_BACKLOG_MAX_BYTES} bytes`, { reason: 'too_many_requests', max_backlog_bytes: RESPONDER_BACKLOG_MAX_BYTES }))
      return
    }
    if (list.length > 0) {
      // the frame the timer measured is complete; what is buffered now (armed in pump) started in this chunk
      clearTimeout(this.partial)
      this.partial = undefined
    }
    if (error !== undefined) {
      // the whole requests before the bad prefix are answered, then the framing is lost
      this.pump()
      this.fatal(new InvalidRequestError(error.message, { reason: error.reason, max_frame_bytes: this.spec.maxFrameBytes }))
      return
    }
    this.pump()
  }

  private onEnd (): void {
    if (this.broken) return
    if (this.frames.buffered > 0) {
      this.fatal(new InvalidRequestError(`truncated frame: the stream ended ${this.frames.buffered} bytes into a frame`, { reason: 'truncated' }))
      return
    }
    this.remoteEnded = true
    this.maybeFinish()
  }
}

/** Register the protocol's handler. Returns a function that unregisters it. */
export async function serve (host: RpcHost, spec: RpcProtocol): Promise<() => Promise<void>> {
  const limits: Limits = {
    handlerTimeoutMs: spec.handlerTimeoutMs ?? HANDLER_TIMEOUT_MS,
    frameTimeoutMs: spec.frameTimeoutMs ?? FRAME_COMPLETION_TIMEOUT_MS
  }
  const log = spec.log ?? componentLogger(undefined, 'wire')
  const budget = spec.heldAnswers ?? heldAnswersOf(host, log)
  const active = new Set<Stream>()
  const onStream = (stream: Stream, connection: Connection): void => {
    active.add(stream)
    // eslint-disable-next-line no-new -- the stream's listeners hold it
    new InboundStream(stream, connection.remotePeer, spec, limits, log, budget, () => { active.delete(stream) })
  }
  await host.handle(spec.protocol, onStream, {
    maxInboundStreams: spec.maxInboundStreams ?? MAX_INBOUND_STREAMS_PER_PROTOCOL,
    maxOutboundStreams: spec.maxOutboundStreams ?? MAX_OUTBOUND_STREAMS_PER_PROTOCOL
  })
  return async () => {
    await host.unhandle(spec.protocol)
    for (const s of active) s.abort(new Error('protocol stopped'))
    active.clear()
  }
}

/** The stream is closed, aborted or reset: what its write buffer still shows goes nowhere. */
function streamGone (stream: Stream): boolean {
  return stream.status === 'closed' || stream.status === 'aborted' || stream.status === 'reset'
}

/** A frame's cost in the backlog: its bytes, and at least the view that holds them (RESPONDER_FRAME_MIN_COST_BYTES). */
function frameCost (frame: Uint8Array): number {
  return Math.max(frame.byteLength, RESPONDER_FRAME_MIN_COST_BYTES)
}

