/**
 * Raw libp2p echo reference: the floor any protocol built on libp2p streams
 * pays. One length-prefixed frame each way on a NEW stream per request, over
 * TCP + Noise + Yamux on loopback.
 */
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import type { Libp2p, Stream } from '@libp2p/interface'
import { tcp } from '@libp2p/tcp'
import { lpStream } from '@libp2p/utils'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p } from 'libp2p'
import { benchRequests } from './stats.ts'
import type { RequestBenchResult } from './stats.ts'

export const ECHO_PROTOCOL = '/aap-bench/echo/1.0.0'
/** per-connection stream limit used on both sides; far above any concurrency we run */
export const ECHO_MAX_STREAMS = 1024

/** A bare libp2p node: TCP, Noise, Yamux, no services. */
export async function createEchoNode (listen: string[] = []): Promise<Libp2p> {
  return createLibp2p({
    addresses: { listen },
    transports: [tcp()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()]
  })
}

/**
 * Server side: echo every length-prefixed frame back, in order, until the
 * remote closes its write side, then close ours. Serves both client modes (one
 * frame per stream, or many frames pipelined on one stream). Each read and
 * write is bounded by `idleTimeoutMs`; any failure aborts the stream.
 */
export async function serveEchoStream (stream: Stream, idleTimeoutMs = 30_000): Promise<void> {
  const lp = lpStream(stream)
  try {
    while (true) {
      let frame
      try {
        frame = await lp.read({ signal: AbortSignal.timeout(idleTimeoutMs) })
      } catch (err) {
        // a clean end of stream between frames surfaces as UnexpectedEOFError
        if (err instanceof Error && err.name === 'UnexpectedEOFError' && stream.remoteWriteStatus !== 'writable') break
        throw err
      }
      await lp.write(frame, { signal: AbortSignal.timeout(idleTimeoutMs) })
    }
    await stream.close({ signal: AbortSignal.timeout(idleTimeoutMs) })
  } catch (err) {
    stream.abort(err instanceof Error ? err : new Error(String(err)))
  }
}

/** Register the echo protocol on `node`. */
export async function handleEcho (node: Libp2p, idleTimeoutMs = 30_000): Promise<void> {
  await node.handle(ECHO_PROTOCOL, (stream) => {
    void serveEchoStream(stream, idleTimeoutMs)
  }, { maxInboundStreams: ECHO_MAX_STREAMS, maxOutboundStreams: ECHO_MAX_STREAMS })
}

/**
 * How requests are carried:
 *  - 'new-stream-per-request': open a stream (multistream-select round trip),
 *    write one frame, read the echo, close; the brief's floor.
 *  - 'one-stream-pipelined': one long-lived stream, frames written back to back
 *    and replies matched in order; the floor for a design that keeps a stream
 *    per peer and pipelines calls on it.
 */
export type EchoMode = 'new-stream-per-request' | 'one-stream-pipelined'

export interface MeasureEchoOptions {
  /** server multiaddr including /p2p/<peerId> */
  addr: string
  /** measured sequential requests */
  requests: number
  /** requests in flight during the throughput phase */
  concurrency: number
  /** frame payload size in bytes */
  payloadBytes: number
  /** default 'new-stream-per-request' */
  mode?: EchoMode
  /** measured requests in the throughput phase; see benchRequests for the default */
  concurrentRequests?: number
  /** unmeasured requests before each phase; see benchRequests for the default */
  warmup?: number
  /** bound on each request (including stream open in new-stream mode); default 10 s */
  timeoutMs?: number
}

export interface EchoResult extends RequestBenchResult {
  kind: 'libp2p-echo'
  protocol: string
  payloadBytes: number
  mode: EchoMode
  /** time to dial and secure the single connection, ms (not part of any request) */
  dialMs: number
}

function toError (err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err))
}

/**
 * Start a client libp2p node in this process, dial `addr` once, then time
 * echo round trips over that one connection in the chosen mode (see EchoMode).
 * The client node is stopped before returning.
 */
export async function measureEcho (opts: MeasureEchoOptions): Promise<EchoResult> {
  const timeoutMs = opts.timeoutMs ?? 10_000
  const mode = opts.mode ?? 'new-stream-per-request'
  const payload = new Uint8Array(opts.payloadBytes)
  for (let i = 0; i < payload.length; i++) payload[i] = i & 0xff
  const checkReply = (byteLength: number): void => {
    if (byteLength !== payload.byteLength) throw new Error(`echo returned ${byteLength} bytes, expected ${payload.byteLength}`)
  }

  const node = await createEchoNode()
  try {
    const t0 = performance.now()
    const connection = await node.dial(multiaddr(opts.addr), { signal: AbortSignal.timeout(timeoutMs) })
    const dialMs = performance.now() - t0

    let request: () => Promise<void>
    let finish = async (): Promise<void> => {}

    if (mode === 'new-stream-per-request') {
      request = async () => {
        const signal = AbortSignal.timeout(timeoutMs)
        const stream = await connection.newStream(ECHO_PROTOCOL, { signal, maxOutboundStreams: ECHO_MAX_STREAMS })
        try {
          const lp = lpStream(stream)
          await lp.write(payload, { signal })
          checkReply((await lp.read({ signal })).byteLength)
          await stream.close({ signal })
        } catch (err) {
          stream.abort(toError(err))
          throw err
        }
      }
    } else {
      const stream = await connection.newStream(ECHO_PROTOCOL, { signal: AbortSignal.timeout(timeoutMs) })
      const lp = lpStream(stream)
      // Writes and reads are each serialised in issue order; since the server
      // echoes in order, the n-th read is the reply to the n-th write.
      let writeTail: Promise<unknown> = Promise.resolve()
      let readTail: Promise<unknown> = Promise.resolve()
      request = async () => {
        const signal = AbortSignal.timeout(timeoutMs)
        const written = writeTail.then(async () => { await lp.write(payload, { signal }) })
        const replied = readTail.then(async () => lp.read({ signal }))
        writeTail = written.catch(() => {})
        readTail = replied.catch(() => {})
        try {
          await written
          checkReply((await replied).byteLength)
        } catch (err) {
          // replies can no longer be matched to requests: fail everything after this
          stream.abort(toError(err))
          throw err
        }
      }
      finish = async () => { await stream.close({ signal: AbortSignal.timeout(timeoutMs) }) }
    }

    const result = await benchRequests(request, {
      name: `libp2p echo (${mode})`,
      requests: opts.requests,
      concurrency: opts.concurrency,
      concurrentRequests: opts.concurrentRequests,
      warmup: opts.warmup
    })
    await finish()
    return {
      kind: 'libp2p-echo',
      protocol: ECHO_PROTOCOL,
      payloadBytes: opts.payloadBytes,
      mode,
      dialMs,
      ...result
    }
  } finally {
    await node.stop()
  }
}
