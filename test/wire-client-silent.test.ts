/**
 * A pooled stream the peer no longer answers on: it reads the requests and
 * sends nothing back. Before, every later call to the peer was pipelined on
 * that stream and timed out too, for good: each call also kept the stream
 * from ever counting as idle. After RPC_SILENT_TIMEOUTS_MAX calls in a row
 * time out with nothing coming back, the stream takes no new calls and goes;
 * the next call opens a new stream and is answered. A peer that answers late
 * keeps its stream: a late frame shows the stream still works.
 */
import type { Stream, StreamMessageEvent } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { FrameDecoder, RpcClient, encodeFrame, type InternalCallOptions } from '../src/wire/rpc.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { dialAddrs } from '../src/wire/host.ts'
import { RPC_SILENT_TIMEOUTS_MAX } from '../src/wire/network-constants.ts'
import { rejectsWith, startLoopbackHost, until } from './helpers.ts'

const SILENT = '/aap-test/silent-first/0.1.0'
const LATE = '/aap-test/answers-late/0.1.0'
/** Short enough for a test, long enough for a loopback answer on a busy machine. */
const SHORT_MS = 300

describe('a stream the peer no longer answers on', () => {
  let a: MeshHost, b: MeshHost
  /** Streams the responder of SILENT got, and whether each was closed or reset by now. */
  const silentStreams: Array<{ closed: boolean }> = []
  /** Requests LATE holds, to answer when the test says. */
  const held: Array<{ stream: Stream, id: number }> = []
  let lateStreams = 0

  beforeAll(async () => {
    a = await startLoopbackHost()
    b = await startLoopbackHost()
    // reads every request; answers nothing on the first stream, everything on later ones
    await b.handle(SILENT, (stream: Stream) => {
      const n = silentStreams.push({ closed: false })
      stream.addEventListener('close', () => { (silentStreams[n - 1] ?? { closed: false }).closed = true })
      const frames = new FrameDecoder(1024)
      stream.addEventListener('message', (evt: StreamMessageEvent) => {
        const data = evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()
        for (const f of frames.push(data)) {
          const req = JSON.parse(new TextDecoder().decode(f)) as { id: number }
          if (n > 1) stream.send(encodeFrame({ id: req.id, ok: true, body: { stream: n } }))
        }
      })
    })
    // reads every request and answers it only when the test releases it
    await b.handle(LATE, (stream: Stream) => {
      lateStreams++
      const frames = new FrameDecoder(1024)
      stream.addEventListener('message', (evt: StreamMessageEvent) => {
        const data = evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()
        for (const f of frames.push(data)) held.push({ stream, id: (JSON.parse(new TextDecoder().decode(f)) as { id: number }).id })
      })
    })
    expect((await dialAddrs(a, b.getMultiaddrs().map(m => m.toString()))).length).toBe(1)
  })
  afterAll(async () => {
    await a.stop()
    await b.stop()
  })

  it('is retired after calls in a row time out on it; the next call gets a new stream and its answer', async () => {
    const client = new RpcClient(a, { protocol: SILENT, maxFrameBytes: 1024, maxStreamsPerPeer: 1 })
    const opts = { responseTimeoutMs: SHORT_MS, callTimeoutMs: 10_000 }
    try {
      for (let i = 0; i < RPC_SILENT_TIMEOUTS_MAX; i++) {
        const err = await rejectsWith(client.call(b.peerId, 'ask', {}, opts), 'AGENT_NOT_FOUND')
        expect(err.details?.reason).toBe('timeout')
      }
      expect(client.stats.streamsRetired).toBe(1)
      expect(await client.call(b.peerId, 'ask', {}, { responseTimeoutMs: 10_000, callTimeoutMs: 10_000 })).toEqual({ stream: 2 })
      // the silent stream is gone at both ends, although its responder never ended it
      await until(() => silentStreams[0]?.closed === true, 'the silent stream to be closed at the responder')
      expect(silentStreams.length).toBe(2)
    } finally {
      client.close()
    }
  })

  /** A client of the peer that answers only when the test says, hearing its late answers; the peer's requests cleared. */
  function lateClient (): { client: RpcClient, late: unknown[], opts: InternalCallOptions, streamsBefore: number } {
    const late: unknown[] = []
    held.length = 0
    return {
      client: new RpcClient(a, { protocol: LATE, maxFrameBytes: 1024, maxStreamsPerPeer: 1 }),
      late,
      opts: { responseTimeoutMs: SHORT_MS, callTimeoutMs: 10_000, onLateAnswer: (body: unknown) => { late.push(body) } },
      streamsBefore: lateStreams
    }
  }

  it('once retired, still hears the late answers its given-up calls wait for, then goes', async () => {
    const { client, late, opts, streamsBefore } = lateClient()
    try {
      // calls in a row time out on a peer that is slow (a delegation whose run it creates while its disk stalls)
      await Promise.all(Array.from({ length: RPC_SILENT_TIMEOUTS_MAX }, async () => rejectsWith(client.call(b.peerId, 'ask', {}, opts), 'AGENT_NOT_FOUND')))
      expect(client.stats.streamsRetired).toBe(1)
      await until(() => held.length === RPC_SILENT_TIMEOUTS_MAX, 'the peer to hold both requests')
      // then answers both: the caller hears of the runs it may have to undo
      for (const h of held.splice(0)) h.stream.send(encodeFrame({ id: h.id, ok: true, body: { late: h.id } }))
      await until(() => late.length === RPC_SILENT_TIMEOUTS_MAX, 'both late answers')
      expect(lateStreams).toBe(streamsBefore + 1)
    } finally {
      client.close()
    }
  })

  it('is kept while the peer answers, however late', async () => {
    const { client, late, opts, streamsBefore } = lateClient()
    try {
      for (let i = 0; i < RPC_SILENT_TIMEOUTS_MAX + 2; i++) {
        await rejectsWith(client.call(b.peerId, 'ask', {}, opts), 'AGENT_NOT_FOUND')
        // the answer comes after the call gave up (the peer, in this process too, may read the request only now)
        await until(() => held.length > 0, 'the peer to hold the request')
        const h = held.shift()
        expect(h).toBeDefined()
        if (h !== undefined) h.stream.send(encodeFrame({ id: h.id, ok: true, body: { late: i } }))
        await until(() => late.length === i + 1, 'the late answer')
      }
      expect(client.stats.streamsRetired).toBe(0)
      expect(lateStreams).toBe(streamsBefore + 1)
    } finally {
      client.close()
    }
  })
})
