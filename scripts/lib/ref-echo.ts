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
 * Server side: read one frame, write it back, close our write side. Any
 * failure (including the timeout) aborts the stream.
 */
export async function serveEchoStream (stream: Stream, timeoutMs = 10_000): Promise<void> {
  const signal = AbortSignal.timeout(timeoutMs)
  try {
    const lp = lpStream(stream)
    const frame = await lp.read({ signal })
    await lp.write(frame, { signal })
    await stream.close({ signal })
  } catch (err) {
    stream.abort(err instanceof Error ? err : new Error(String(err)))
  }
}

/** Register the echo protocol on `node`. */
export async function handleEcho (node: Libp2p, timeoutMs = 10_000): Promise<void> {
  await node.handle(ECHO_PROTOCOL, (stream) => {
    void serveEchoStream(stream, timeoutMs)
  }, { maxInboundStreams: ECHO_MAX_STREAMS, maxOutboundStreams: ECHO_MAX_STREAMS })
}

export interface MeasureEchoOptions {
  /** server multiaddr including /p2p/<peerId> */
  addr: string
  /** measured sequential requests */
  requests: number
  /** requests in flight during the throughput phase */
  concurrency: number
  /** frame payload size in bytes */
  payloadBytes: number
  /** measured requests in the throughput phase; see benchRequests for the default */
  concurrentRequests?: number
  /** unmeasured requests before each phase; see benchRequests for the default */
  warmup?: number
  /** bound on each request (stream open + write + read + close); default 10 s */
  timeoutMs?: number
}

export interface EchoResult extends RequestBenchResult {
  kind: 'libp2p-echo'
  protocol: string
  payloadBytes: number
  /** how a request is carried */
  mode: 'new-stream-per-request'
  /** time to dial and secure the single connection, ms (not part of any request) */
  dialMs: number
}

/**
 * Start a client libp2p node in this process, dial `addr` once, then time
 * request/response round trips, each on a fresh stream: open (multistream-select
 * negotiation), write one frame, read the echoed frame, close.
 */
export async function measureEcho (opts: MeasureEchoOptions): Promise<EchoResult> {
  const timeoutMs = opts.timeoutMs ?? 10_000
  const payload = new Uint8Array(opts.payloadBytes)
  for (let i = 0; i < payload.length; i++) payload[i] = i & 0xff

  const node = await createEchoNode()
  try {
    const t0 = performance.now()
    const connection = await node.dial(multiaddr(opts.addr), { signal: AbortSignal.timeout(timeoutMs) })
    const dialMs = performance.now() - t0

    const request = async (): Promise<void> => {
      const signal = AbortSignal.timeout(timeoutMs)
      const stream = await connection.newStream(ECHO_PROTOCOL, { signal, maxOutboundStreams: ECHO_MAX_STREAMS })
      try {
        const lp = lpStream(stream)
        await lp.write(payload, { signal })
        const reply = await lp.read({ signal })
        if (reply.byteLength !== payload.byteLength) {
          throw new Error(`echo returned ${reply.byteLength} bytes, expected ${payload.byteLength}`)
        }
        await stream.close({ signal })
      } catch (err) {
        stream.abort(err instanceof Error ? err : new Error(String(err)))
        throw err
      }
    }

    const result = await benchRequests(request, {
      name: 'libp2p echo',
      requests: opts.requests,
      concurrency: opts.concurrency,
      concurrentRequests: opts.concurrentRequests,
      warmup: opts.warmup
    })
    return {
      kind: 'libp2p-echo',
      protocol: ECHO_PROTOCOL,
      payloadBytes: opts.payloadBytes,
      mode: 'new-stream-per-request',
      dialMs,
      ...result
    }
  } finally {
    await node.stop()
  }
}
