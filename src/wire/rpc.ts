/**
 * All raw stream I/O of the node lives here.
 *
 * Every aap protocol is request/response over length-prefixed JSON frames
 * (unsigned varint length, then UTF-8 JSON). A stream carries many requests:
 * each request has an `id` and its response echoes it, so a caller keeps one
 * long-lived stream per peer and protocol and pipelines calls on it instead of
 * paying a stream negotiation per call. Responders never throw at the caller:
 * every failure is an error frame with a typed code. See protocols/README.md.
 *
 * Timeouts, as the caller sees them (all AGENT_NOT_FOUND with
 * `details.reason = "timeout"` and `details.timeout` naming the limit, since an
 * agent that does not answer is, for the profile, unavailable):
 *  - `dial`: connect + protocol negotiation (DIAL_TIMEOUT_MS);
 *  - `response`: from writing the request to its response frame (FIRST_BYTE_TIMEOUT_MS);
 *  - `call`: the whole call, dial included (CALL_TIMEOUT_MS).
 * A responder whose handler overruns HANDLER_TIMEOUT_MS answers TIMEOUT itself.
 */
import type { Connection, Libp2p, PeerId, Stream, StreamMessageEvent } from '@libp2p/interface'
import {
  CALL_TIMEOUT_MS, DIAL_TIMEOUT_MS, ERROR_MESSAGE_MAX_CHARS, FIRST_BYTE_TIMEOUT_MS, FRAME_COMPLETION_TIMEOUT_MS,
  HANDLER_TIMEOUT_MS, LATE_ANSWERS_TRACKED_PER_STREAM, MAX_INBOUND_STREAMS_PER_PROTOCOL, MAX_LENGTH_PREFIX_BYTES,
  MAX_OUTBOUND_STREAMS_PER_PROTOCOL, MAX_PIPELINED_REQUESTS_PER_STREAM, STREAM_CLOSE_TIMEOUT_MS, STREAM_IDLE_TIMEOUT_MS
} from '../constants.ts'
import {
  AapError, AgentNotFoundError, InvalidRequestError, TimeoutError, isErrorCode, toAapError,
  type ErrorFrame
} from '../errors.ts'
import { schema, type Validator } from '../schema/validate.ts'

/** What a responder learns about a call: the authenticated peer, never a payload claim. */
export interface CallContext {
  /** The Noise-authenticated remote peer. */
  peer: PeerId
  /** Aborted when the stream closes or the handler overruns its time. */
  signal: AbortSignal
}

export interface RpcMethod {
  handle: (body: unknown, ctx: CallContext) => Promise<object>
  /**
   * Told, once per successful `handle`, whether its answer was handed to the
   * stream (`delivered`) or not (the stream was gone, or the handler overran
   * its time and the caller was already told TIMEOUT). A method that creates
   * state uses it to start work only once the caller has its answer, or to
   * undo what nobody will ever hear about.
   */
  settled?: (result: object, delivered: boolean) => void
}

/** A method whose request body is checked against its schema before `fn` sees it. */
export function method<Req, Res extends object> (
  request: Validator<Req>,
  fn: (req: Req, ctx: CallContext) => Promise<Res>,
  settled?: (result: Res, delivered: boolean) => void
): RpcMethod {
  const m: RpcMethod = { handle: async (body, ctx) => fn(request.assert(body, 'request body'), ctx) }
  if (settled !== undefined) m.settled = (result, delivered) => { settled(result as Res, delivered) }
  return m
}

export interface RpcProtocol {
  protocol: string
  maxFrameBytes: number
  methods: Record<string, RpcMethod>
  maxInboundStreams?: number
  maxOutboundStreams?: number
  handlerTimeoutMs?: number
  /** A frame that has started must be complete within this (default FRAME_COMPLETION_TIMEOUT_MS). */
  frameTimeoutMs?: number
}

export interface CallOptions {
  signal?: AbortSignal
  dialTimeoutMs?: number
  /** From the write of the request to its response. */
  responseTimeoutMs?: number
  /** The whole call, dial included. */
  callTimeoutMs?: number
}

/** Options of `RpcClient.call` that only code in this repository uses. */
export interface InternalCallOptions extends CallOptions {
  /**
   * Called with the body of a success answer that arrives after the call gave
   * up (timeout or abort), so the caller can clean up what the responder did.
   */
  onLateAnswer?: (body: Record<string, unknown>) => void
}

type Host = Pick<Libp2p, 'handle' | 'unhandle' | 'dialProtocol'>

const isRequestEnvelope = schema<{ id: number, type: string, body: Record<string, unknown> }>('aap:common#/definitions/RequestEnvelope')

// ---- framing ------------------------------------------------------------------

const encoder = new TextEncoder()
const decoder = new TextDecoder('utf-8', { fatal: true })

/** Encode one frame: varint length + JSON. */
export function encodeFrame (value: unknown): Uint8Array {
  const json = JSON.stringify(value)
  // JSON text is at most 3 bytes per UTF-16 unit; write the body after room for the longest prefix
  const room = MAX_LENGTH_PREFIX_BYTES
  const buf = new Uint8Array(room + json.length * 3)
  const { written } = encoder.encodeInto(json, buf.subarray(room))
  let n = written
  let prefixLen = 1
  while (n >= 0x80) { prefixLen++; n = Math.floor(n / 128) }
  let at = room - prefixLen
  const start = at
  n = written
  while (n >= 0x80) {
    buf[at++] = (n & 0x7f) | 0x80
    n = Math.floor(n / 128)
  }
  buf[at] = n
  return buf.subarray(start, room + written)
}

/** Why a byte stream stopped making sense as frames. */
class FramingError extends Error {
  readonly reason: 'oversized' | 'bad_prefix'
  constructor (reason: 'oversized' | 'bad_prefix', message: string) {
    super(message)
    this.reason = reason
  }
}

/**
 * Splits a byte stream into frames. Checks each length prefix as soon as it
 * is complete, so an oversized frame is refused before its body is buffered.
 */
export class FrameDecoder {
  private readonly maxFrameBytes: number
  private pending: Uint8Array = new Uint8Array(0)

  constructor (maxFrameBytes: number) {
    this.maxFrameBytes = maxFrameBytes
  }

  /** Bytes of a frame that has started but is not complete. */
  get buffered (): number {
    return this.pending.byteLength
  }

  /** Append bytes; returns every frame they complete. Throws FramingError. */
  push (chunk: Uint8Array): Uint8Array[] {
    let buf = chunk
    if (this.pending.byteLength > 0) {
      buf = new Uint8Array(this.pending.byteLength + chunk.byteLength)
      buf.set(this.pending, 0)
      buf.set(chunk, this.pending.byteLength)
    }
    const frames: Uint8Array[] = []
    let at = 0
    while (at < buf.byteLength) {
      // read the varint length
      let len = 0
      let shift = 1
      let i = at
      let complete = false
      while (i < buf.byteLength) {
        const b = buf[i] ?? 0
        len += (b & 0x7f) * shift
        i++
        if ((b & 0x80) === 0) { complete = true; break }
        shift *= 128
        if (i - at >= MAX_LENGTH_PREFIX_BYTES) throw new FramingError('bad_prefix', `length prefix longer than ${MAX_LENGTH_PREFIX_BYTES} bytes`)
      }
      if (!complete) break
      if (len > this.maxFrameBytes) throw new FramingError('oversized', `frame of ${len} bytes exceeds ${this.maxFrameBytes} bytes`)
      if (buf.byteLength - i < len) break
      frames.push(buf.subarray(i, i + len))
      at = i + len
    }
    this.pending = at === buf.byteLength ? new Uint8Array(0) : buf.slice(at)
    return frames
  }
}

function parseJson (bytes: Uint8Array): unknown {
  try {
    return JSON.parse(decoder.decode(bytes))
  } catch (err) {
    throw new InvalidRequestError('frame is not UTF-8 JSON', { reason: 'not_json' }, { cause: err })
  }
}

function isRecord (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function isFrameId (v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 0xffffffff
}

/**
 * The frames one stream sends. Frames queued in the same run of the
 * microtask queue leave as one write (one yamux frame, one Noise encryption,
 * one socket write) instead of one each: under load, answers released by one
 * group commit, or calls issued as earlier answers arrive, share a write.
 * While the stream waits to drain, frames queue behind it.
 */
class Outbox {
  private readonly stream: Stream
  private frames: Uint8Array[] = []
  private size = 0
  private batch: PromiseWithResolvers<boolean> | undefined
  private draining: Promise<void> | undefined

  constructor (stream: Stream) {
    this.stream = stream
  }

  /** Resolves true once the frame is handed to the stream, false if the stream cannot take it. */
  async send (frame: Uint8Array): Promise<boolean> {
    if (this.batch === undefined) {
      this.batch = Promise.withResolvers<boolean>()
      queueMicrotask(() => { this.flush() })
    }
    this.frames.push(frame)
    this.size += frame.byteLength
    return this.batch.promise
  }

  /** Resolves once nothing is queued or waiting for a drain. */
  async whenSent (): Promise<void> {
    while (this.batch !== undefined || this.draining !== undefined) {
      if (this.draining !== undefined) {
        await this.draining
      } else {
        const b = this.batch
        this.flush()
        await b?.promise
      }
    }
  }

  /** Hand everything queued to the stream now (unless it waits for a drain). */
  flush (): void {
    const batch = this.batch
    if (batch === undefined) return
    if (this.draining !== undefined) return // the drain will flush
    const frames = this.frames
    const size = this.size
    this.batch = undefined
    this.frames = []
    this.size = 0
    if (this.stream.writeStatus !== 'writable') {
      batch.resolve(false)
      return
    }
    let data: Uint8Array
    if (frames.length === 1 && frames[0] !== undefined) {
      data = frames[0]
    } else {
      data = new Uint8Array(size)
      let at = 0
      for (const f of frames) { data.set(f, at); at += f.byteLength }
    }
    try {
      if (this.stream.send(data)) {
        batch.resolve(true)
        return
      }
    } catch {
      batch.resolve(false)
      return
    }
    // accepted, but the stream's buffer is full: what comes next waits for the drain
    batch.resolve(true)
    this.draining = this.stream.onDrain().then(() => {
      this.draining = undefined
      this.flush()
    }, () => {
      this.draining = undefined
      this.batch?.resolve(false)
      this.batch = undefined
      this.frames = []
      this.size = 0
    })
  }
}

function chunkOf (evt: StreamMessageEvent): Uint8Array {
  const data = evt.data
  return data instanceof Uint8Array ? data : data.subarray()
}

function errorFrame (err: AapError): ErrorFrame {
  const frame = err.toFrame()
  if (frame.message.length > ERROR_MESSAGE_MAX_CHARS) frame.message = frame.message.slice(0, ERROR_MESSAGE_MAX_CHARS)
  return frame
}

// ---- responder ----------------------------------------------------------------

/** Register the protocol's handler. Returns a function that unregisters it. */
export async function serve (host: Host, spec: RpcProtocol): Promise<() => Promise<void>> {
  const handlerTimeoutMs = spec.handlerTimeoutMs ?? HANDLER_TIMEOUT_MS
  const frameTimeoutMs = spec.frameTimeoutMs ?? FRAME_COMPLETION_TIMEOUT_MS
  const active = new Set<Stream>()

  const onStream = (stream: Stream, connection: Connection): void => {
    active.add(stream)
    const peer = connection.remotePeer
    const frames = new FrameDecoder(spec.maxFrameBytes)
    /** Controllers of the requests in progress, aborted when the stream closes. */
    const running = new Set<AbortController>()
    /**
     * Complete frames read but not yet handled: one chunk of bytes can hold
     * many requests, and at most MAX_PIPELINED_REQUESTS_PER_STREAM run at once.
     */
    const backlog: Uint8Array[] = []
    /** No more requests will be read: the caller ended its side, or framing was lost. */
    let remoteEnded = false
    /** Reading stopped because framing was lost. */
    let broken = false
    let finished = false
    let idle: ReturnType<typeof setTimeout> | undefined
    let partial: ReturnType<typeof setTimeout> | undefined

    const armIdle = (): void => {
      clearTimeout(idle)
      idle = setTimeout(() => { void stream.close().catch(() => { stream.abort(new Error('idle')) }) }, STREAM_IDLE_TIMEOUT_MS * 2)
      idle.unref?.()
    }
    armIdle()

    stream.addEventListener('close', () => {
      finished = true
      clearTimeout(idle)
      clearTimeout(partial)
      for (const c of running) c.abort(new AgentNotFoundError('stream closed', { reason: 'closed' }))
      running.clear()
      backlog.length = 0
      active.delete(stream)
    })

    const outbox = new Outbox(stream)
    /** Resolves true once the frame is handed to the stream (false: the peer went away; nothing to tell). */
    const reply = async (value: unknown): Promise<boolean> => outbox.send(encodeFrame(value))

    /**
     * Framing is lost: say why (no request id can be known), read nothing
     * more, and close once the requests already read have their answers.
     */
    const fatal = (err: AapError): void => {
      if (finished || broken) return
      broken = true
      remoteEnded = true
      clearTimeout(partial)
      void reply({ id: null, ok: false, error: errorFrame(err) }).then((sent) => {
        if (sent) maybeFinish()
        else stream.abort(err)
      })
    }

    /** Once the caller has closed its side and every answer is out, close ours. */
    const maybeFinish = (): void => {
      if (!remoteEnded || running.size > 0 || backlog.length > 0 || finished) return
      finished = true
      void outbox.whenSent()
        .then(async () => { await stream.close({ signal: AbortSignal.timeout(STREAM_CLOSE_TIMEOUT_MS) }) })
        .catch(() => { stream.abort(new Error('close timed out')) })
    }

    const handleFrame = (bytes: Uint8Array): void => {
      let envelope: unknown
      try {
        envelope = parseJson(bytes)
      } catch (err) {
        void reply({ id: null, ok: false, error: errorFrame(toAapError(err)) })
        return
      }
      const id = isRecord(envelope) && isFrameId(envelope.id) ? envelope.id : null
      if (id === null || !isRequestEnvelope(envelope)) {
        void reply({ id, ok: false, error: errorFrame(new InvalidRequestError('request frame must be {id, type, body} with an object body', { reason: 'bad_envelope' })) })
        return
      }
      const m = Object.hasOwn(spec.methods, envelope.type) ? spec.methods[envelope.type] : undefined
      if (m === undefined) {
        void reply({ id, ok: false, error: errorFrame(new InvalidRequestError(`unknown request type "${envelope.type}" on ${spec.protocol}`, { reason: 'unknown_type' })) })
        return
      }
      const ctl = new AbortController()
      running.add(ctl)
      let answered = false
      const done = (): void => {
        clearTimeout(timer)
        running.delete(ctl)
        pump()
        maybeFinish()
      }
      // each answer is handed to the stream (synchronously, in reply) before done() may close it
      const timer = setTimeout(() => {
        answered = true
        ctl.abort(new TimeoutError(`handler exceeded ${handlerTimeoutMs} ms`))
        void reply({ id, ok: false, error: { code: 'TIMEOUT', message: `${envelope.type} did not finish within ${handlerTimeoutMs} ms`, details: { limit_ms: handlerTimeoutMs } } })
        done()
      }, handlerTimeoutMs)
      m.handle(envelope.body, { peer, signal: ctl.signal }).then(async (result) => {
        if (answered || ctl.signal.aborted) {
          m.settled?.(result, false)
          return
        }
        answered = true
        const sent = reply({ id, ok: true, body: result })
        done()
        m.settled?.(result, await sent)
      }, (err: unknown) => {
        if (answered) return
        answered = true
        const e = toAapError(err)
        void reply({ id, ok: false, error: e.code === 'INTERNAL' ? { code: 'INTERNAL', message: 'internal error' } : errorFrame(e) })
        done()
      })
    }

    /** Handle backlogged frames while there is room; read more only when the backlog is empty. */
    const pump = (): void => {
      while (backlog.length > 0 && running.size < MAX_PIPELINED_REQUESTS_PER_STREAM && !finished) {
        const next = backlog.shift()
        if (next !== undefined) handleFrame(next)
      }
      const full = backlog.length > 0 || running.size >= MAX_PIPELINED_REQUESTS_PER_STREAM
      if (full && stream.readStatus === 'readable') stream.pause()
      else if (!full && stream.readStatus === 'paused') stream.resume()
    }

    stream.addEventListener('message', (evt: StreamMessageEvent) => {
      if (finished || broken) return
      armIdle()
      let list: Uint8Array[]
      try {
        list = frames.push(chunkOf(evt))
      } catch (err) {
        const e = err as FramingError
        fatal(new InvalidRequestError(e.message, { reason: e.reason, max_frame_bytes: spec.maxFrameBytes }))
        return
      }
      for (const f of list) backlog.push(f)
      pump()
      // a frame that has started must finish: a peer that stops mid-frame holds a buffer otherwise
      if (frames.buffered === 0) {
        clearTimeout(partial)
        partial = undefined
      } else if (partial === undefined) {
        partial = setTimeout(() => {
          fatal(new InvalidRequestError(`truncated frame: ${frames.buffered} bytes and no end within ${frameTimeoutMs} ms`, { reason: 'truncated' }))
        }, frameTimeoutMs)
      }
    })

    stream.addEventListener('end', () => {
      if (broken) return
      if (frames.buffered > 0) {
        fatal(new InvalidRequestError(`truncated frame: the stream ended ${frames.buffered} bytes into a frame`, { reason: 'truncated' }))
        return
      }
      remoteEnded = true
      maybeFinish()
    })
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

// ---- caller -------------------------------------------------------------------

interface Pending {
  type: string
  resolve: (body: Record<string, unknown>) => void
  reject: (err: AapError) => void
  timer: ReturnType<typeof setTimeout>
  onLateAnswer: ((body: Record<string, unknown>) => void) | undefined
}

interface RequestOptions {
  signal: AbortSignal | undefined
  timeoutMs: number
  /** Which limit `timeoutMs` is, for the error. */
  timeout: 'response' | 'call'
  onLateAnswer: ((body: Record<string, unknown>) => void) | undefined
}

function errorFromFrame (value: unknown): AapError {
  if (isRecord(value) && isErrorCode(value.code) && typeof value.message === 'string') {
    const frame: ErrorFrame = { code: value.code, message: value.message.slice(0, ERROR_MESSAGE_MAX_CHARS) }
    if (isRecord(value.details)) frame.details = value.details
    return AapError.fromFrame(frame)
  }
  return new InvalidRequestError('peer sent a malformed error frame', { reason: 'bad_response' })
}

class Session {
  readonly stream: Stream
  private readonly outbox: Outbox
  readonly pending = new Map<number, Pending>()
  /** Calls that gave up but want to hear a late success answer. */
  private readonly abandoned = new Map<number, (body: Record<string, unknown>) => void>()
  private readonly peerName: string
  private nextId = 1
  closed = false
  lastUsed = Date.now()

  constructor (stream: Stream, peerName: string, maxFrameBytes: number, onClose: () => void) {
    this.stream = stream
    this.outbox = new Outbox(stream)
    this.peerName = peerName
    const frames = new FrameDecoder(maxFrameBytes)
    stream.addEventListener('close', () => {
      this.closed = true
      onClose()
      this.failAll(new AgentNotFoundError(`stream to agent ${peerName} closed before it answered`, { reason: 'closed' }))
      this.abandoned.clear()
    })
    stream.addEventListener('message', (evt: StreamMessageEvent) => {
      if (this.closed) return
      let list: Uint8Array[]
      try {
        list = frames.push(chunkOf(evt))
      } catch (err) {
        this.fatal(new InvalidRequestError(`agent ${peerName} sent a bad frame: ${(err as Error).message}`, { reason: 'bad_response' }))
        return
      }
      for (const f of list) this.onFrame(f)
    })
  }

  private onFrame (bytes: Uint8Array): void {
    let res: unknown
    try {
      res = parseJson(bytes)
    } catch {
      this.fatal(new InvalidRequestError(`agent ${this.peerName} sent a frame that is not JSON`, { reason: 'bad_response' }))
      return
    }
    if (!isRecord(res) || (res.id !== null && !isFrameId(res.id))) {
      this.fatal(new InvalidRequestError(`agent ${this.peerName} sent a malformed response frame`, { reason: 'bad_response' }))
      return
    }
    if (res.id === null) {
      // a stream-level error frame: the responder gave up on this stream
      this.fatal(errorFromFrame(res.error))
      return
    }
    const p = this.pending.get(res.id)
    if (p === undefined) {
      const late = this.abandoned.get(res.id)
      if (late !== undefined) {
        this.abandoned.delete(res.id)
        if (res.ok === true && isRecord(res.body)) late(res.body)
      }
      return
    }
    this.pending.delete(res.id)
    clearTimeout(p.timer)
    if (res.ok === true && isRecord(res.body)) p.resolve(res.body)
    else if (res.ok === false) p.reject(errorFromFrame(res.error))
    else p.reject(new InvalidRequestError(`agent ${this.peerName} sent a malformed response frame`, { reason: 'bad_response' }))
  }

  private failAll (err: AapError): void {
    for (const p of this.pending.values()) {
      clearTimeout(p.timer)
      p.reject(err)
    }
    this.pending.clear()
  }

  private fatal (err: AapError): void {
    this.closed = true
    this.failAll(err)
    this.stream.abort(err)
  }

  /** Give up on a call; keep listening for its answer if it wants to hear it late. */
  private abandon (id: number, err: AapError): void {
    const p = this.pending.get(id)
    if (p === undefined) return
    this.pending.delete(id)
    clearTimeout(p.timer)
    if (p.onLateAnswer !== undefined) {
      this.abandoned.set(id, p.onLateAnswer)
      if (this.abandoned.size > LATE_ANSWERS_TRACKED_PER_STREAM) {
        const oldest = this.abandoned.keys().next().value
        if (oldest !== undefined) this.abandoned.delete(oldest)
      }
    }
    p.reject(err)
  }

  async request (type: string, body: object, opts: RequestOptions): Promise<Record<string, unknown>> {
    if (this.closed) throw new AgentNotFoundError(`stream to agent ${this.peerName} is closed`, { reason: 'closed' })
    const signal = opts.signal
    // before any promise exists: an aborted caller on a stream that is also closing
    // would otherwise leave a rejected promise nobody awaits (an unhandled rejection)
    if (signal?.aborted === true) {
      throw new TimeoutError(`${type} to agent ${this.peerName} was aborted by the caller`, { reason: 'aborted' }, { cause: signal.reason })
    }
    const id = this.nextId++
    if (this.nextId > 0xffffffff) this.nextId = 1
    this.lastUsed = Date.now()
    const { promise, resolve, reject } = Promise.withResolvers<Record<string, unknown>>()
    const timer = setTimeout(() => {
      this.abandon(id, new AgentNotFoundError(`agent ${this.peerName} did not answer ${type} within ${opts.timeoutMs} ms`, {
        reason: 'timeout', timeout: opts.timeout, limit_ms: opts.timeoutMs
      }))
    }, opts.timeoutMs)
    this.pending.set(id, { type, resolve, reject, timer, onLateAnswer: opts.onLateAnswer })
    const onAbort = (): void => {
      this.abandon(id, new TimeoutError(`${type} to agent ${this.peerName} was aborted by the caller`, { reason: 'aborted' }, { cause: signal?.reason }))
    }
    signal?.addEventListener('abort', onAbort, { once: true })
    try {
      if (this.stream.writeStatus !== 'writable') throw new AgentNotFoundError(`stream to agent ${this.peerName} is closed`, { reason: 'closed' })
      // a peer that does not read holds the frame in the outbox, bounded by this call's own timeout
      void this.outbox.send(encodeFrame({ id, type, body })).then((sent) => {
        if (!sent) this.abandon(id, new AgentNotFoundError(`stream to agent ${this.peerName} closed before the request was sent`, { reason: 'closed' }))
      })
      return await promise
    } catch (err) {
      const p = this.pending.get(id)
      if (p !== undefined) {
        clearTimeout(p.timer)
        this.pending.delete(id)
      }
      if (err instanceof AapError) throw err
      throw new AgentNotFoundError(`stream to agent ${this.peerName} failed: ${(err as Error).message}`, { reason: 'closed' }, { cause: err })
    } finally {
      signal?.removeEventListener('abort', onAbort)
    }
  }
}

/**
 * Calls a protocol on remote peers over pooled, pipelined streams. One client
 * per protocol; `close()` ends every stream it opened.
 */
export class RpcClient {
  private readonly host: Host
  private readonly protocol: string
  private readonly maxFrameBytes: number
  private readonly maxStreams: number
  private readonly sessions = new Map<string, Session[]>()
  private readonly opening = new Map<string, Promise<Session>>()
  private readonly sweeper: ReturnType<typeof setInterval>

  constructor (host: Host, init: { protocol: string, maxFrameBytes: number, maxStreamsPerPeer?: number }) {
    this.host = host
    this.protocol = init.protocol
    this.maxFrameBytes = init.maxFrameBytes
    this.maxStreams = init.maxStreamsPerPeer ?? Math.max(1, MAX_OUTBOUND_STREAMS_PER_PROTOCOL / 2)
    this.sweeper = setInterval(() => { this.closeIdle() }, STREAM_IDLE_TIMEOUT_MS / 2)
    this.sweeper.unref?.()
  }

  async call (peer: PeerId, type: string, body: object, opts: InternalCallOptions = {}): Promise<Record<string, unknown>> {
    const started = Date.now()
    const callTimeoutMs = opts.callTimeoutMs ?? CALL_TIMEOUT_MS
    const responseTimeoutMs = opts.responseTimeoutMs ?? FIRST_BYTE_TIMEOUT_MS
    const key = peer.toString()
    const session = this.pick(key) ?? await this.session(peer, key, opts, callTimeoutMs)
    const left = callTimeoutMs - (Date.now() - started)
    if (left <= 0) {
      throw new AgentNotFoundError(`agent ${key} did not answer ${type} within ${callTimeoutMs} ms`, { reason: 'timeout', timeout: 'call', limit_ms: callTimeoutMs })
    }
    const byResponse = responseTimeoutMs <= left
    return session.request(type, body, {
      signal: opts.signal,
      timeoutMs: byResponse ? responseTimeoutMs : left,
      timeout: byResponse ? 'response' : 'call',
      onLateAnswer: opts.onLateAnswer
    })
  }

  /** A usable stream to the peer without waiting, if there is one with room. */
  private pick (key: string): Session | undefined {
    const list = this.sessions.get(key)
    if (list === undefined) return undefined
    let best: Session | undefined
    // a stream closing for writing takes no new requests (it still delivers the answers it owes)
    for (const s of list) if (!s.closed && s.stream.writeStatus === 'writable' && (best === undefined || s.pending.size < best.pending.size)) best = s
    if (best !== undefined && (best.pending.size < MAX_PIPELINED_REQUESTS_PER_STREAM || list.length >= this.maxStreams)) return best
    return undefined
  }

  private async session (peer: PeerId, key: string, opts: CallOptions, callTimeoutMs: number): Promise<Session> {
    const inProgress = this.opening.get(key)
    if (inProgress !== undefined) return inProgress
    const dialTimeoutMs = Math.min(opts.dialTimeoutMs ?? DIAL_TIMEOUT_MS, callTimeoutMs)
    const timeout = dialTimeoutMs < callTimeoutMs ? 'dial' : 'call'
    const opening = this.open(peer, key, opts.signal, dialTimeoutMs, timeout).finally(() => { this.opening.delete(key) })
    this.opening.set(key, opening)
    return opening
  }

  private async open (peer: PeerId, key: string, callerSignal: AbortSignal | undefined, dialTimeoutMs: number, timeout: 'dial' | 'call'): Promise<Session> {
    const timer = AbortSignal.timeout(dialTimeoutMs)
    const signal = callerSignal === undefined ? timer : AbortSignal.any([callerSignal, timer])
    let stream: Stream
    try {
      stream = await this.host.dialProtocol(peer, this.protocol, { signal })
    } catch (err) {
      const e = err as Error
      if (timer.aborted) {
        throw new AgentNotFoundError(`agent ${key} did not answer the dial within ${dialTimeoutMs} ms`, { reason: 'timeout', timeout, limit_ms: dialTimeoutMs }, { cause: err })
      }
      if (callerSignal?.aborted === true) throw new TimeoutError(`dial of agent ${key} was aborted by the caller`, { reason: 'aborted' }, { cause: err })
      throw new AgentNotFoundError(`agent ${key} is unreachable on ${this.protocol}: ${e.message}`, { reason: 'unreachable' }, { cause: err })
    }
    const session = new Session(stream, key, this.maxFrameBytes, () => {
      const l = this.sessions.get(key)
      if (l === undefined) return
      const rest = l.filter(s => s !== session)
      if (rest.length === 0) this.sessions.delete(key)
      else this.sessions.set(key, rest)
    })
    const l = this.sessions.get(key) ?? []
    l.push(session)
    this.sessions.set(key, l)
    return session
  }

  private closeIdle (): void {
    const cutoff = Date.now() - STREAM_IDLE_TIMEOUT_MS
    for (const list of this.sessions.values()) {
      for (const s of list) {
        if (s.pending.size === 0 && s.lastUsed < cutoff) void s.stream.close().catch(() => {})
      }
    }
  }

  close (): void {
    clearInterval(this.sweeper)
    for (const list of this.sessions.values()) for (const s of list) s.stream.abort(new Error('client closed'))
    this.sessions.clear()
  }
}
