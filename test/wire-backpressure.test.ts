/**
 * A caller that asks and does not read its answers: the responder stops
 * handling (and reading) its requests once the answers wait for the stream
 * to drain, so what the caller sends stays in its own send window instead of
 * piling up as answers in the responder's memory; once the caller reads
 * again, every request it sent is answered. Our own client ends a stream
 * whose peer has not read a request for as long as a call may wait.
 * Real libp2p nodes; the test protocols are served with serve()/RpcClient.
 */
import type { Stream, StreamMessageEvent } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { FrameDecoder, RpcClient, encodeFrame, serve } from '../src/wire/rpc.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const BIG = '/aap-test/big-answers/0.1.0'
const DEAF = '/aap-test/deaf/0.1.0'
const ANSWER_CHARS = 4000
const REQUESTS = 20_000

describe('backpressure on the wire', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let handled = 0
  /** Times the responder held its reads for want of a drain. */
  let holds = 0
  const readsHeld = { settled: false, promise: Promise.resolve(), resolve: () => {} }
  readsHeld.promise = new Promise<void>(resolve => { readsHeld.resolve = () => { readsHeld.settled = true; resolve() } })
  const unserve: Array<() => Promise<void>> = []
  const deaf: Stream[] = []

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    unserve.push(await serve(B.host, {
      protocol: BIG,
      maxFrameBytes: 8 * 1024,
      methods: { big: { handle: async () => { handled++; return { data: 'x'.repeat(ANSWER_CHARS) } } } },
      onReadsHeld: () => { holds++; readsHeld.resolve() }
    }))
    // a peer that takes streams and never reads them
    await B.host.handle(DEAF, (stream) => { stream.pause(); deaf.push(stream) })
  })
  afterAll(async () => {
    for (const u of unserve) await u()
    for (const s of deaf) s.abort(new Error('test over'))
    await stopAll(nodes)
  })

  it('a caller that does not read its answers gets no more requests handled until it reads; then all are answered', async () => {
    const stream = await A.host.dialProtocol(B.host.peerId, BIG, { signal: AbortSignal.timeout(5_000) })
    const decoder = new FrameDecoder(16 * 1024)
    let answered = 0
    stream.addEventListener('message', (evt: StreamMessageEvent) => {
      const data = evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()
      answered += decoder.push(data).length
    })
    stream.pause()
    // send while the stream drains; stop once the responder holds its reads (it waits for this caller to read)
    let sent = 0
    while (sent < REQUESTS && !readsHeld.settled) {
      sent++
      if (!stream.send(encodeFrame({ id: sent, type: 'big', body: {} }))) await Promise.race([stream.onDrain(), readsHeld.promise])
    }
    expect(readsHeld.settled).toBe(true)
    // it stopped after about its send window of answers; before, it read and answered all 20,000 the caller
    // sent, holding about 80 MB of answers the caller did not read
    expect(handled).toBeLessThan(REQUESTS / 10)
    stream.resume()
    await until(() => answered === sent, 'every request sent answered once the caller reads', 30_000)
    expect(handled).toBe(sent)

    // and again, after the stream drained once: @libp2p/utils' onDrain() resolved at once from then on, so the
    // responder went on handling (3,000 of 3,000 here, their answers queued in its memory)
    const holdsBefore = holds
    const handledBefore = handled
    stream.pause()
    let again = 0
    while (again < 3_000 && holds === holdsBefore) {
      again++
      sent++
      if (!stream.send(encodeFrame({ id: sent, type: 'big', body: {} }))) {
        await Promise.race([new Promise(resolve => { stream.addEventListener('drain', resolve, { once: true }) }), until(() => holds > holdsBefore, 'the reads held again')])
      }
    }
    await until(() => holds > holdsBefore, 'the responder to hold its reads again')
    expect(handled - handledBefore).toBeLessThan(1_500)
    stream.resume()
    await until(() => answered === sent, 'every request of the second round answered once the caller reads', 30_000)
    expect(handled).toBe(sent)
    await stream.close()
  })

  it('our client ends a stream whose peer has not read a request for as long as a call may wait', async () => {
    const client = new RpcClient(A.host, { protocol: DEAF, maxFrameBytes: 64 * 1024, maxStreamsPerPeer: 1 })
    try {
      const payload = { data: 'y'.repeat(60 * 1024) }
      // more requests than the stream's send window takes; each waits 300 ms for an answer that never comes, and
      // those that never left end the stream
      const calls = Array.from({ length: 16 }, async () => client.call(B.host.peerId, 'any', payload, { responseTimeoutMs: 300, callTimeoutMs: 5_000 }))
      const results = await Promise.allSettled(calls)
      expect(results.every(r => r.status === 'rejected')).toBe(true)
      const reasons = results.map(r => (r as PromiseRejectedResult).reason as { details?: { reason?: string } })
      expect(reasons.some(e => e.details?.reason === 'stalled')).toBe(true)
      // the stuck stream is gone: the next call opens a new one
      await until(() => A.host.getConnections(B.host.peerId).every(c => c.streams.filter(s => s.protocol === DEAF).length <= deaf.length), 'the stuck stream closed')
      await rejectsWith(client.call(B.host.peerId, 'any', {}, { responseTimeoutMs: 200, callTimeoutMs: 2_000 }), 'AGENT_NOT_FOUND')
    } finally {
      client.close()
    }
  })
})
