/**
 * All raw stream I/O of the node lives here.
 *
 * Every aap protocol is request/response over length-prefixed JSON frames
 * (unsigned varint length, then UTF-8 JSON). A stream carries many requests:
 * each request has an `id` and its response echoes it, so a caller keeps one
 * long-lived stream per peer and protocol and pipelines calls on it instead of
 * paying a stream negotiation per call. Responders never throw at the caller:
 * every failure is an error frame with a typed code. See protocols/README.md.
 */
import { LengthPrefixedDecoder } from '@libp2p/utils'
import type { Connection, Libp2p, PeerId, Stream, StreamMessageEvent } from '@libp2p/interface'
/** A decoded frame (a Frame from the decoder). */
interface Frame { subarray: () => Uint8Array }
import {
  CALL_TIMEOUT_MS, DIAL_TIMEOUT_MS, FIRST_BYTE_TIMEOUT_MS, HANDLER_TIMEOUT_MS,
  MAX_INBOUND_STREAMS_PER_PROTOCOL, MAX_LENGTH_PREFIX_BYTES, MAX_OUTBOUND_STREAMS_PER_PROTOCOL,
  MAX_PIPELINED_REQUESTS_PER_STREAM, STREAM_IDLE_TIMEOUT_MS
} from '../constants.ts'
import {
  AapError, AgentNotFoundError, InvalidRequestError, TimeoutError, isErrorCode, toAapError,
  type ErrorFrame
} from '../errors.ts'
import type { Validator } from '../schema/validate.ts'

/** What a responder learns about a call: the authenticated peer, never a payload claim. */
export interface CallContext {
  /** The Noise-authenticated remote peer. */
  peer: PeerId
  signal: AbortSignal
}

export interface RpcMethod {
  handle: (body: unknown, ctx: CallContext) => Promise<object>
}

/** A method whose request body is checked against its schema before `fn` sees it. */
export function method<Req> (request: Validator<Req>, fn: (req: Req, ctx: CallContext) => Promise<object>): RpcMethod {
  return {
    handle: async (body, ctx) => fn(request.assert(body, 'request body'), ctx)
  }
}

export interface RpcProtocol {
  protocol: string
  maxFrameBytes: number
  methods: Record<string, RpcMethod>
  maxInboundStreams?: number
  maxOutboundStreams?: number
  handlerTimeoutMs?: number
}

export interface CallOptions {
  signal?: AbortSignal
  dialTimeoutMs?: number
  /** From the write of the request to its response. */
  responseTimeoutMs?: number
  /** The whole call, dial included. */
  callTimeoutMs?: number
}

type Host = Pick<Libp2p, 'handle' | 'unhandle' | 'dialProtocol'>

// ---- framing ------------------------------------------------------------------

const encoder = new TextEncoder()
const decoder = new TextDecoder('utf-8', { fatal: true })

function varint (n: number): Uint8Array {
  const out: number[] = []
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80)
    n = Math.floor(n / 128)
  }
  out.push(n)
  return Uint8Array.from(out)
}

/** Encode one frame: varint length + JSON. */
export function encodeFrame (value: unknown): Uint8Array {
  const body = encoder.encode(JSON.stringify(value))
  const prefix = varint(body.byteLength)
  const out = new Uint8Array(prefix.byteLength + body.byteLength)
  out.set(prefix, 0)
  out.set(body, prefix.byteLength)
  return out
}

function parseFrame (data: Frame): unknown {
  try {
    return JSON.parse(decoder.decode(data.subarray()))
  } catch (err) {
    throw new InvalidRequestError('frame is not UTF-8 JSON', undefined, { cause: err })
  }
}

function isRecord (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function isFrameId (v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 0xffffffff
}

/** Send one frame, waiting for the stream to drain when its buffer is full. */
async function sendFrame (stream: Stream, value: unknown, signal?: AbortSignal): Promise<void> {
  if (stream.writeStatus !== 'writable') throw new AgentNotFoundError('stream is closed for writing')
  if (!stream.send(encodeFrame(value))) {
    await stream.onDrain({ signal })
  }
}

/**
 * Feed a stream's bytes through a length-prefixed decoder and hand each frame
 * to `onFrame`. Oversized frames and garbage prefixes abort the stream after
 * `onFatal` has had a chance to send an error frame.
 */
function readFrames (stream: Stream, maxFrameBytes: number, onFrame: (frame: Frame) => void, onFatal: (err: AapError) => void): void {
  const lp = new LengthPrefixedDecoder({
    maxDataLength: maxFrameBytes,
    maxBufferSize: maxFrameBytes + MAX_LENGTH_PREFIX_BYTES + 16
  })
  let failed = false
  stream.addEventListener('message', (evt: StreamMessageEvent) => {
    if (failed) return
    try {
      for (const frame of lp.decode(evt.data)) onFrame(frame)
    } catch (err) {
      failed = true
      const e = err as Error
      const tooBig = /length|buffer/i.test(e.message) || e.name === 'InvalidDataLengthError'
      onFatal(new InvalidRequestError(tooBig ? `frame exceeds ${maxFrameBytes} bytes` : `bad frame: ${e.message}`, { max_frame_bytes: maxFrameBytes }))
    }
  })
}

// ---- responder ----------------------------------------------------------------

/** Register the protocol's handler. Returns a function that unregisters it. */
export async function serve (host: Host, spec: RpcProtocol): Promise<() => Promise<void>> {
  const handlerTimeoutMs = spec.handlerTimeoutMs ?? HANDLER_TIMEOUT_MS
  const active = new Set<Stream>()

  const onStream = (stream: Stream, connection: Connection): void => {
    active.add(stream)
    const peer = connection.remotePeer
    let inFlight = 0
    let idle: ReturnType<typeof setTimeout> | undefined
    const closeCtl = new AbortController()

    const armIdle = (): void => {
      clearTimeout(idle)
      idle = setTimeout(() => { void stream.close().catch(() => stream.abort(new Error('idle'))) }, STREAM_IDLE_TIMEOUT_MS * 2)
      idle.unref?.()
    }
    armIdle()

    stream.addEventListener('close', () => {
      clearTimeout(idle)
      closeCtl.abort()
      active.delete(stream)
    })

    const reply = (value: unknown): void => {
      sendFrame(stream, value, closeCtl.signal).catch(() => { /* peer went away; nothing to tell */ })
    }

    readFrames(stream, spec.maxFrameBytes, (frame) => {
      armIdle()
      let envelope: unknown
      try {
        envelope = parseFrame(frame)
      } catch (err) {
        reply({ id: null, ok: false, error: toAapError(err).toFrame() })
        return
      }
      const id = isRecord(envelope) && isFrameId(envelope.id) ? envelope.id : null
      if (id === null || !isRecord(envelope) || typeof envelope.type !== 'string' || !isRecord(envelope.body)) {
        reply({ id, ok: false, error: new InvalidRequestError('request frame must be {id, type, body}').toFrame() })
        return
      }
      const m = Object.hasOwn(spec.methods, envelope.type) ? spec.methods[envelope.type] : undefined
      if (m === undefined) {
        reply({ id, ok: false, error: new InvalidRequestError(`unknown request type "${envelope.type.slice(0, 32)}" on ${spec.protocol}`).toFrame() })
        return
      }
      inFlight++
      if (inFlight >= MAX_PIPELINED_REQUESTS_PER_STREAM) stream.pause()
      const signal = AbortSignal.any([closeCtl.signal, AbortSignal.timeout(handlerTimeoutMs)])
      const body = envelope.body
      void (async () => {
        try {
          const result = await m.handle(body, { peer, signal })
          reply({ id, ok: true, body: result })
        } catch (err) {
          const e = toAapError(err)
          reply({ id, ok: false, error: e.code === 'INTERNAL' ? { code: 'INTERNAL', message: 'internal error' } : e.toFrame() })
        } finally {
          inFlight--
          if (inFlight < MAX_PIPELINED_REQUESTS_PER_STREAM) stream.resume()
        }
      })()
    }, (err) => {
      // framing is lost: say why, then close the stream
      void sendFrame(stream, { id: null, ok: false, error: err.toFrame() }, AbortSignal.timeout(1000))
        .then(async () => { await stream.close({ signal: AbortSignal.timeout(1000) }) })
        .catch(() => { stream.abort(err) })
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
  resolve: (body: Record<string, unknown>) => void
  reject: (err: AapError) => void
}

class Session {
  readonly stream: Stream
  readonly pending = new Map<number, Pending>()
  private nextId = 1
  closed = false
  lastUsed = Date.now()

  constructor (stream: Stream, maxFrameBytes: number, onClose: () => void) {
    this.stream = stream
    stream.addEventListener('close', () => {
      this.closed = true
      onClose()
      this.failAll(new AgentNotFoundError('stream to agent closed before it answered'))
    })
    readFrames(stream, maxFrameBytes, (frame) => {
      let res: unknown
      try {
        res = parseFrame(frame)
      } catch {
        this.fatal(new InvalidRequestError('peer sent a frame that is not JSON'))
        return
      }
      if (!isRecord(res) || (res.id !== null && !isFrameId(res.id))) {
        this.fatal(new InvalidRequestError('peer sent a malformed response frame'))
        return
      }
      if (res.id === null) {
        // a connection-level error frame: the responder gave up on this stream
        this.fatal(errorFromFrame(res.error))
        return
      }
      const p = this.pending.get(res.id)
      if (p === undefined) return // late answer to a call that already timed out
      this.pending.delete(res.id)
      if (res.ok === true && isRecord(res.body)) p.resolve(res.body)
      else if (res.ok === false) p.reject(errorFromFrame(res.error))
      else p.reject(new InvalidRequestError('peer sent a malformed response frame'))
    }, (err) => { this.fatal(err) })
  }

  private failAll (err: AapError): void {
    for (const p of this.pending.values()) p.reject(err)
    this.pending.clear()
  }

  private fatal (err: AapError): void {
    this.closed = true
    this.failAll(err)
    this.stream.abort(err)
  }

  async request (type: string, body: object, opts: { signal: AbortSignal, responseTimeoutMs: number }): Promise<Record<string, unknown>> {
    if (this.closed) throw new AgentNotFoundError('stream to agent is closed')
    const id = this.nextId++
    if (this.nextId > 0xffffffff) this.nextId = 1
    this.lastUsed = Date.now()
    const { promise, resolve, reject } = Promise.withResolvers<Record<string, unknown>>()
    this.pending.set(id, { resolve, reject })
    const responseSignal = AbortSignal.any([opts.signal, AbortSignal.timeout(opts.responseTimeoutMs)])
    const onAbort = (): void => {
      if (this.pending.delete(id)) {
        reject(new TimeoutError(`no answer to ${type} in time`, { type }, { cause: responseSignal.reason }))
      }
    }
    responseSignal.addEventListener('abort', onAbort, { once: true })
    try {
      await sendFrame(this.stream, { id, type, body }, responseSignal)
      return await promise
    } catch (err) {
      this.pending.delete(id)
      throw toAapError(err)
    } finally {
      responseSignal.removeEventListener('abort', onAbort)
    }
  }
}

function errorFromFrame (value: unknown): AapError {
  if (isRecord(value) && isErrorCode(value.code) && typeof value.message === 'string') {
    const frame: ErrorFrame = { code: value.code, message: value.message.slice(0, 1024) }
    if (isRecord(value.details)) frame.details = value.details
    return AapError.fromFrame(frame)
  }
  return new InvalidRequestError('peer sent a malformed error frame')
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

  async call (peer: PeerId, type: string, body: object, opts: CallOptions = {}): Promise<Record<string, unknown>> {
    const callSignal = AbortSignal.any([
      ...(opts.signal === undefined ? [] : [opts.signal]),
      AbortSignal.timeout(opts.callTimeoutMs ?? CALL_TIMEOUT_MS)
    ])
    const session = await this.session(peer, AbortSignal.any([callSignal, AbortSignal.timeout(opts.dialTimeoutMs ?? DIAL_TIMEOUT_MS)]))
    return session.request(type, body, { signal: callSignal, responseTimeoutMs: opts.responseTimeoutMs ?? FIRST_BYTE_TIMEOUT_MS })
  }

  private async session (peer: PeerId, signal: AbortSignal): Promise<Session> {
    const key = peer.toString()
    const list = (this.sessions.get(key) ?? []).filter(s => !s.closed)
    let best: Session | undefined
    for (const s of list) if (best === undefined || s.pending.size < best.pending.size) best = s
    if (best !== undefined && (best.pending.size < MAX_PIPELINED_REQUESTS_PER_STREAM || list.length >= this.maxStreams)) return best
    const inProgress = this.opening.get(key)
    if (inProgress !== undefined) return inProgress
    const opening = this.open(peer, key, signal).finally(() => { this.opening.delete(key) })
    this.opening.set(key, opening)
    return opening
  }

  private async open (peer: PeerId, key: string, signal: AbortSignal): Promise<Session> {
    let stream: Stream
    try {
      stream = await this.host.dialProtocol(peer, this.protocol, { signal })
    } catch (err) {
      const e = err as Error
      if (signal.aborted) throw new AgentNotFoundError(`agent ${key} did not answer the dial in time`, { reason: 'timeout' }, { cause: err })
      throw new AgentNotFoundError(`agent ${key} is unreachable on ${this.protocol}: ${e.message}`, { reason: 'unreachable' }, { cause: err })
    }
    const session = new Session(stream, this.maxFrameBytes, () => {
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
