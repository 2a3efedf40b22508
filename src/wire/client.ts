/**
 * The calling side of an aap stream protocol: pooled, pipelined streams per
 * peer (Session), each request matched to its answer by id and bounded by its
 * own timeouts (see rpc.ts for which).
 */
import type { PeerId, Stream, StreamMessageEvent } from '@libp2p/interface'
import {
  CALL_TIMEOUT_MS, DIAL_ATTEMPTS_MAX, DIAL_TIMEOUT_MS, FRAME_ID_MAX, LATE_ANSWERS_TRACKED_PER_STREAM,
  MAX_OUTBOUND_STREAMS_PER_PROTOCOL, MAX_PIPELINED_REQUESTS_PER_STREAM, RESPONSE_TIMEOUT_MS, STREAM_CLOSE_TIMEOUT_MS,
  STREAM_IDLE_TIMEOUT_MS
} from '../constants.ts'
import { AapError, AgentNotFoundError, InvalidRequestError, reasonOf, TimeoutError } from '../errors.ts'
import { componentLogger, type Logger } from '../logger.ts'
import { chunkOf, encodeFrame, errorFromFrame, FrameDecoder, isRecord, responseEnvelope } from './framing.ts'
import { dialStream } from './dial.ts'
import { RPC_SILENT_TIMEOUTS_MAX, RPC_UNSENT_RETRIES_MAX } from './network-constants.ts'
import { watchRequests } from './in-flight.ts'
import { Outbox } from './outbox.ts'
import { untilAborted, withDeadline } from '../util/deadline.ts'

import type { CallOptions, InternalCallOptions, RpcHost } from './rpc.ts'
import { closeThenEnd } from './stream-end.ts'

/** A signal that never aborts (a caller with none). */
const NEVER = new AbortController().signal

/** Errors of calls whose stream was found closed before the request left: sent again elsewhere (RpcClient.call). */
const unsentErrors = new WeakSet<AapError>()

function unsent (err: AgentNotFoundError): AgentNotFoundError {
  unsentErrors.add(err)
  return err
}

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

class Session {
  readonly stream: Stream
  private readonly outbox: Outbox
  readonly pending = new Map<number, Pending>()
  /** Calls that gave up but want to hear a late success answer. */
  private readonly abandoned = new Map<number, (body: Record<string, unknown>) => void>()
  private readonly peerName: string
  private readonly log: Logger
  private readonly onRetire: () => void
  private nextId = 1
  closed = false
  /** Taken out of use after calls in a row timed out on it with nothing coming back (see `timedOut`). */
  retired = false
  /** Calls in a row that timed out with no frame arriving on this stream in between. */
  private silentTimeouts = 0
  /** Ends a retired stream whose given-up calls still wait for late answers (endIfRetired). */
  private retireTimer: ReturnType<typeof setTimeout> | undefined
  lastUsed = Date.now()

  constructor (stream: Stream, peerName: string, maxFrameBytes: number, log: Logger, onClose: () => void, onRetire: () => void) {
    this.stream = stream
    this.outbox = new Outbox(stream, log)
    this.peerName = peerName
    this.log = log
    this.onRetire = onRetire
    // the connection budget does not close a connection while a call on it waits for its answer
    watchRequests(stream, () => this.pending.size > 0)
    const frames = new FrameDecoder(maxFrameBytes)
    stream.addEventListener('close', () => {
      clearTimeout(this.retireTimer)
      this.closed = true
      onClose()
      this.failAll(new AgentNotFoundError(`stream to agent ${peerName} closed before it answered`, { reason: 'closed' }))
      this.abandoned.clear()
    })
    // the responder ended its side (it closed an idle stream): nothing more will be answered here, so the calls
    // waiting fail now and no new call picks this stream; ours closes too
    stream.addEventListener('end', () => {
      if (this.closed) return
      this.closed = true
      this.failAll(new AgentNotFoundError(`agent ${peerName} ended the stream before it answered`, { reason: 'closed' }))
      if (stream.writeStatus === 'writable') stream.close().catch((err: unknown) => { stream.abort(err instanceof Error ? err : new Error('close failed')) })
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
    const res = responseEnvelope(bytes, this.peerName)
    if (res instanceof AapError) {
      this.fatal(res)
      return
    }
    // the peer still answers on this stream, however late
    this.silentTimeouts = 0
    const p = this.pending.get(res.id)
    if (p === undefined) {
      const late = this.abandoned.get(res.id)
      if (late !== undefined) {
        this.abandoned.delete(res.id)
        if (res.ok === true && isRecord(res.body)) late(res.body)
      }
      this.endIfRetired()
      return
    }
    this.pending.delete(res.id)
    clearTimeout(p.timer)
    if (res.ok === true && isRecord(res.body)) p.resolve(res.body)
    else if (res.ok === false) p.reject(errorFromFrame(res.error))
    else p.reject(new InvalidRequestError(`agent ${this.peerName} sent a malformed response frame`, { reason: 'bad_response' }))
    this.endIfRetired()
  }

  /**
   * A call ran out of time. A stream on which RPC_SILENT_TIMEOUTS_MAX calls in
   * a row did so with no frame at all coming back is one the peer no longer
   * answers on (a responder stuck on it, a stream lost on the way): it takes
   * no new calls, its write side is closed so an honest responder answers what
   * it has read and ends it, and it is aborted once its own calls have ended.
   */
  private timedOut (): void {
    if (this.closed || this.retired || ++this.silentTimeouts < RPC_SILENT_TIMEOUTS_MAX) return
    this.retired = true
    this.onRetire()
    this.log.debug({ peer: this.peerName, timeouts: this.silentTimeouts }, 'calls in a row timed out with nothing coming back on the stream; it takes no new calls')
    if (this.stream.writeStatus === 'writable') {
      this.stream.close({ signal: AbortSignal.timeout(STREAM_CLOSE_TIMEOUT_MS) }).catch((err: unknown) => {
        this.log.debug({ err, peer: this.peerName }, 'a retired stream did not close its write side in time')
      })
    }
    this.endIfRetired()
  }

  /**
   * A retired stream goes once no call waits on it (a peer that never ends
   * its side cannot keep it). Calls that gave up but want a late answer (a
   * delegation whose run may exist at the executor) are given
   * RESPONSE_TIMEOUT_MS more for it: an honest responder answers what it
   * read, then ends its side.
   */
  private endIfRetired (): void {
    if (!this.retired || this.closed || this.pending.size > 0) return
    if (this.abandoned.size > 0) {
      this.retireTimer ??= setTimeout(() => { this.endRetired() }, RESPONSE_TIMEOUT_MS)
      return
    }
    this.endRetired()
  }

  private endRetired (): void {
    clearTimeout(this.retireTimer)
    if (this.closed) return
    this.closed = true
    this.abandoned.clear()
    this.stream.abort(new Error('retired: calls in a row timed out with no answer'))
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
    this.endIfRetired()
  }

  async request (type: string, body: object, opts: RequestOptions): Promise<Record<string, unknown>> {
    if (this.closed) throw unsent(new AgentNotFoundError(`stream to agent ${this.peerName} is closed`, { reason: 'closed' }))
    const signal = opts.signal
    // before any promise exists: an aborted caller on a stream that is also closing
    // would otherwise leave a rejected promise nobody awaits (an unhandled rejection)
    if (signal?.aborted === true) {
      throw new TimeoutError(`${type} to agent ${this.peerName} was aborted by the caller`, { reason: 'aborted' }, { cause: signal.reason })
    }
    const id = this.nextId++
    if (this.nextId > FRAME_ID_MAX) this.nextId = 1
    this.lastUsed = Date.now()
    const { promise, resolve, reject } = Promise.withResolvers<Record<string, unknown>>()
    const timer = setTimeout(() => {
      this.abandon(id, new AgentNotFoundError(`agent ${this.peerName} did not answer ${type} within ${opts.timeoutMs} ms`, {
        reason: 'timeout', timeout: opts.timeout, limit_ms: opts.timeoutMs
      }))
      // the stream has not drained for at least half the call's time (a peer that reads, however slowly, drains
      // it now and then): the peer stopped reading, and requests queued behind would only pile up
      if (this.outbox.waitingFor() >= opts.timeoutMs / 2 && !this.closed) {
        this.fatal(new AgentNotFoundError(`agent ${this.peerName} stopped reading its stream`, { reason: 'stalled' }))
      }
      this.timedOut()
    }, opts.timeoutMs)
    this.pending.set(id, { type, resolve, reject, timer, onLateAnswer: opts.onLateAnswer })
    const onAbort = (): void => {
      this.abandon(id, new TimeoutError(`${type} to agent ${this.peerName} was aborted by the caller`, { reason: 'aborted' }, { cause: signal?.reason }))
    }
    signal?.addEventListener('abort', onAbort, { once: true })
    try {
      if (this.stream.writeStatus !== 'writable') throw unsent(new AgentNotFoundError(`stream to agent ${this.peerName} is closed`, { reason: 'closed' }))
      // a peer that does not read holds the frame in the outbox until a call's timeout ends the stream
      void this.outbox.send(encodeFrame({ id, type, body })).then((sent) => {
        if (!sent) this.abandon(id, unsent(new AgentNotFoundError(`stream to agent ${this.peerName} closed before the request was sent`, { reason: 'closed' })))
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
  private readonly host: RpcHost
  private readonly log: Logger
  private readonly protocol: string
  private readonly maxFrameBytes: number
  private readonly maxStreams: number
  private readonly sessions = new Map<string, Session[]>()
  private readonly opening = new Map<string, Promise<Session>>()
  private readonly sweeper: ReturnType<typeof setInterval>
  /**
   * Dials made again after one timed out or found no address (see `dialed`);
   * streams taken out of use after calls in a row timed out on them with no
   * answer (RPC_SILENT_TIMEOUTS_MAX); calls sent again on another stream
   * because theirs closed before the request left (RPC_UNSENT_RETRIES_MAX).
   */
  readonly stats = { dialRetries: 0, streamsRetired: 0, unsentRetries: 0 }

  constructor (host: RpcHost, init: { protocol: string, maxFrameBytes: number, maxStreamsPerPeer?: number, log?: Logger }) {
    this.host = host
    this.log = init.log ?? componentLogger(undefined, 'wire')
    this.protocol = init.protocol
    this.maxFrameBytes = init.maxFrameBytes
    this.maxStreams = init.maxStreamsPerPeer ?? Math.max(1, MAX_OUTBOUND_STREAMS_PER_PROTOCOL / 2)
    this.sweeper = setInterval(() => { this.closeIdle() }, STREAM_IDLE_TIMEOUT_MS / 2)
    this.sweeper.unref?.()
  }

  async call (peer: PeerId, type: string, body: object, opts: InternalCallOptions = {}): Promise<Record<string, unknown>> {
    const started = Date.now()
    const callTimeoutMs = opts.callTimeoutMs ?? CALL_TIMEOUT_MS
    const responseTimeoutMs = opts.responseTimeoutMs ?? RESPONSE_TIMEOUT_MS
    const key = peer.toString()
    for (let attempt = 0; ; attempt++) {
      const session = this.pick(key) ?? await this.dialed(peer, key, opts, callTimeoutMs, started)
      const left = callTimeoutMs - (Date.now() - started)
      if (left <= 0) {
        throw new AgentNotFoundError(`agent ${key} did not answer ${type} within ${callTimeoutMs} ms`, { reason: 'timeout', timeout: 'call', limit_ms: callTimeoutMs })
      }
      const byResponse = responseTimeoutMs <= left
      try {
        return await session.request(type, body, {
          signal: opts.signal,
          timeoutMs: byResponse ? responseTimeoutMs : left,
          timeout: byResponse ? 'response' : 'call',
          onLateAnswer: opts.onLateAnswer
        })
      } catch (err) {
        // the stream closed before the request left: nothing reached the peer, so another stream may carry it
        if (!(err instanceof AapError) || !unsentErrors.has(err) || attempt >= RPC_UNSENT_RETRIES_MAX || opts.signal?.aborted === true) throw err
        this.stats.unsentRetries++
        this.log.debug({ peer: key, protocol: this.protocol, type }, 'a stream closed before the request left: sent on another')
      }
    }
  }

  /** A usable stream to the peer without waiting, if there is one with room. */
  private pick (key: string): Session | undefined {
    const list = this.sessions.get(key)
    if (list === undefined) return undefined
    let best: Session | undefined
    // a stream closing for writing takes no new requests (it still delivers the answers it owes)
    for (const s of list) if (!s.closed && !s.retired && s.stream.writeStatus === 'writable' && (best === undefined || s.pending.size < best.pending.size)) best = s
    if (best !== undefined && (best.pending.size < MAX_PIPELINED_REQUESTS_PER_STREAM || list.length >= this.maxStreams)) return best
    return undefined
  }

  /**
   * A new stream to the peer. A dial that timed out, or that found no address
   * for the peer (its peer lookup failed), is made again, up to
   * DIAL_ATTEMPTS_MAX in all, while the call's budget lasts: no request was
   * sent, so nothing is done twice, and a dial that missed its time on a busy
   * path (a peer lookup, a handshake behind a stalled event loop) often gets
   * through the second time. A peer that refused the connection is not dialed again.
   */
  private async dialed (peer: PeerId, key: string, opts: CallOptions, callTimeoutMs: number, started: number): Promise<Session> {
    let left = callTimeoutMs - (Date.now() - started)
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.session(peer, key, opts, left)
      } catch (err) {
        // the budget left is read once, so the next dial never gets a limit of zero or less
        left = callTimeoutMs - (Date.now() - started)
        const again = err instanceof AgentNotFoundError && (err.details?.timeout === 'dial' || (err.cause as Error | undefined)?.name === 'NoValidAddressesError')
        if (!again || attempt >= DIAL_ATTEMPTS_MAX || opts.signal?.aborted === true || left <= 0) {
          if (again && attempt > 1) throw new AgentNotFoundError(`${err.message} (${attempt} attempts)`, { ...err.details, attempts: attempt }, { cause: err })
          throw err
        }
        this.stats.dialRetries++
        this.log.debug({ peer: key, protocol: this.protocol, attempt, reason: err.details?.reason }, 'a dial failed to reach the peer in time or found no address; dialing again within the call budget')
      }
    }
  }

  /**
   * A new stream, dialed once for every caller that asks meanwhile. The dial
   * belongs to none of them (its own limit, the first caller's dial timeout):
   * each caller waits for it within its own signal and budget, so one that
   * gives up or has a short budget does not fail the others.
   */
  private async session (peer: PeerId, key: string, opts: CallOptions, callTimeoutMs: number): Promise<Session> {
    const signal = opts.signal
    if (signal?.aborted === true) throw new TimeoutError(`dial of agent ${key} was aborted by the caller`, { reason: 'aborted' }, { cause: signal.reason })
    let opening = this.opening.get(key)
    if (opening === undefined) {
      opening = this.open(peer, key, opts.dialTimeoutMs ?? DIAL_TIMEOUT_MS).finally(() => { this.opening.delete(key) })
      // every caller may have left before it ends: its failure is then nobody's, and only logged
      opening.catch((err: unknown) => { this.log.debug({ err, peer: key, protocol: this.protocol }, 'a dial failed') })
      this.opening.set(key, opening)
    }
    const waitMs = Math.min(opts.dialTimeoutMs ?? DIAL_TIMEOUT_MS, callTimeoutMs)
    const timeout = waitMs < callTimeoutMs ? 'dial' : 'call'
    const wait = withDeadline(signal ?? NEVER, waitMs)
    try {
      // the dial failing on its own limit is a dial that timed out, for every caller (each may dial again within its budget)
      return await untilAborted(opening, wait.signal)
    } catch (err) {
      if (wait.signal.aborted && signal !== undefined && signal.reason === wait.signal.reason) {
        throw new TimeoutError(`dial of agent ${key} was aborted by the caller`, { reason: 'aborted' }, { cause: signal.reason })
      }
      if (wait.signal.aborted) throw new AgentNotFoundError(`agent ${key} did not answer the dial within ${waitMs} ms`, { reason: 'timeout', timeout, limit_ms: waitMs })
      throw err
    } finally {
      wait.clear()
    }
  }

  /** Dial a stream within `dialTimeoutMs` (for no caller in particular: see `session`). */
  private async open (peer: PeerId, key: string, dialTimeoutMs: number): Promise<Session> {
    const signal = AbortSignal.timeout(dialTimeoutMs)
    let stream: Stream
    try {
      stream = await dialStream(this.host, peer, this.protocol, { signal, log: this.log })
    } catch (err) {
      if (signal.aborted) {
        throw new AgentNotFoundError(`agent ${key} did not answer the dial within ${dialTimeoutMs} ms`, { reason: 'timeout', timeout: 'dial', limit_ms: dialTimeoutMs }, { cause: err })
      }
      throw new AgentNotFoundError(`agent ${key} is unreachable on ${this.protocol}: ${reasonOf(err)}`, { reason: 'unreachable' }, { cause: err })
    }
    if (this.closed) {
      // the client closed while the dial was under way (it no longer follows any caller's signal)
      stream.abort(new Error('client closed'))
      throw new AgentNotFoundError(`stream to agent ${key} opened after its client closed`, { reason: 'closed' })
    }
    const session = new Session(stream, key, this.maxFrameBytes, this.log, () => {
      const l = this.sessions.get(key)
      if (l === undefined) return
      const rest = l.filter(s => s !== session)
      if (rest.length === 0) this.sessions.delete(key)
      else this.sessions.set(key, rest)
    }, () => { this.stats.streamsRetired++ })
    const l = this.sessions.get(key) ?? []
    l.push(session)
    this.sessions.set(key, l)
    return session
  }

  private closeIdle (): void {
    const cutoff = Date.now() - STREAM_IDLE_TIMEOUT_MS
    for (const list of this.sessions.values()) {
      for (const s of list) {
        if (s.pending.size === 0 && s.lastUsed < cutoff) {
          // a responder that never ends its side would keep the session, and its decoder, for good (stream-end.ts)
          void closeThenEnd(s.stream, this.log, 'idle')
        }
      }
    }
  }

  private closed = false

  close (): void {
    this.closed = true
    clearInterval(this.sweeper)
    for (const list of this.sessions.values()) for (const s of list) s.stream.abort(new Error('client closed'))
    this.sessions.clear()
  }
}
