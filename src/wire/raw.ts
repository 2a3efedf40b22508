/**
 * A raw client for the AAP wire: one request per stream, written as a raw
 * frame, for tools that must send what the RpcClient refuses to send
 * client-side (the conformance kit: a resume from a stranger, a block without
 * a checkpoint, half a frame) and keep the exact answer frame as evidence.
 */
import type { Libp2p, PeerId, Stream, StreamMessageEvent } from '@libp2p/interface'
import { RAW_CALL_MAX_FRAME_BYTES, RAW_CALL_TIMEOUT_MS, DIAL_TIMEOUT_MS } from '../constants.ts'
import { FrameDecoder, encodeFrame } from './framing.ts'

export interface WireError { code: string, message: string, details?: Record<string, unknown> }

/** One answer frame as the target sent it. */
export interface Frame {
  id: number | null
  ok: boolean
  body?: Record<string, unknown>
  error?: WireError
}

/** The kit could not get an answer at all (no stream, no frame in time, a frame that is not an envelope). */
export class WireFailure extends Error {
  constructor (message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'WireFailure'
  }
}

const text = new TextDecoder('utf-8', { fatal: true })

function asFrame (bytes: Uint8Array): Frame {
  const v = JSON.parse(text.decode(bytes)) as unknown
  if (typeof v !== 'object' || v === null || typeof (v as Frame).ok !== 'boolean') throw new WireFailure('the answer is not a response envelope')
  return v as Frame
}

export interface RawCallOptions {
  timeoutMs?: number
  /** Bound on opening the stream (default DIAL_TIMEOUT_MS). */
  dialTimeoutMs?: number
  /** Write these bytes instead of the request frame (a stalled or broken caller). */
  bytes?: Uint8Array
  /** Write the frame in two halves this far apart (a caller on a slow path); the answer's time counts from the first. */
  splitGapMs?: number
}

/**
 * Write `{id: 1, type, body}` on a new stream of `protocol` to `peer` and
 * return the answer frame (success or error). Throws WireFailure when there
 * is none within `timeoutMs`.
 */
export async function rawCall (
  host: Pick<Libp2p, 'dialProtocol'>, peer: PeerId, protocol: string, type: string, body: unknown, opts: RawCallOptions = {}
): Promise<Frame> {
  let stream: Stream
  try {
    stream = await host.dialProtocol(peer, protocol, { signal: AbortSignal.timeout(opts.dialTimeoutMs ?? DIAL_TIMEOUT_MS) })
  } catch (err) {
    throw new WireFailure(`cannot open ${protocol} to ${peer.toString()}: ${(err as Error).message}`, { cause: err })
  }
  const timeoutMs = opts.timeoutMs ?? RAW_CALL_TIMEOUT_MS
  const decoder = new FrameDecoder(RAW_CALL_MAX_FRAME_BYTES)
  const answer = Promise.withResolvers<Frame>()
  const timer = setTimeout(() => { answer.reject(new WireFailure(`no answer to ${type} on ${protocol} within ${timeoutMs} ms`)) }, timeoutMs)
  stream.addEventListener('message', (evt: StreamMessageEvent) => {
    try {
      const data = evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()
      for (const f of decoder.push(data)) {
        const frame = asFrame(f)
        if (frame.id === 1 || frame.id === null) answer.resolve(frame)
      }
    } catch (err) {
      answer.reject(new WireFailure(`unreadable answer to ${type}: ${(err as Error).message}`, { cause: err }))
    }
  })
  stream.addEventListener('close', () => { answer.reject(new WireFailure(`stream closed before an answer to ${type}`)) })
  let answered = false
  try {
    const frame = opts.bytes ?? encodeFrame({ id: 1, type, body })
    const half = opts.splitGapMs === undefined ? frame.byteLength : Math.max(1, Math.floor(frame.byteLength / 2))
    try {
      stream.send(frame.subarray(0, half))
      if (half < frame.byteLength) {
        // the answer may come (or fail) meanwhile: then the second half is not written
        const gap = Promise.withResolvers<void>()
        const wait = setTimeout(gap.resolve, opts.splitGapMs)
        await Promise.race([gap.promise, answer.promise.then(() => undefined, () => undefined)])
        clearTimeout(wait)
        if (stream.status === 'open') stream.send(frame.subarray(half))
      }
    } catch (err) {
      // the answer promise is always awaited below, so no rejection of it goes unobserved
      answer.reject(new WireFailure(`cannot write ${type} on ${protocol}: ${(err as Error).message}`, { cause: err }))
    }
    const got = await answer.promise
    answered = true
    return got
  } finally {
    clearTimeout(timer)
    if (!answered && stream.status === 'open') {
      // a caller that gave up is gone: the responder must see it at once, not after a graceful close
      stream.abort(new WireFailure(`the kit gave up on ${type}`))
    } else if (stream.status === 'open') {
      await stream.close({ signal: AbortSignal.timeout(DIAL_TIMEOUT_MS) }).catch((err: unknown) => {
        stream.abort(err instanceof Error ? err : new Error(String(err)))
      })
    }
  }
}
