/**
 * Callers of a bulk protocol that ask for chunks and never read them. The
 * bulk responder used to be outside the node's bound on unread answers
 * (held-answers.ts): each such stream kept a chunk in its write buffer and
 * one made ahead, four streams per connection, and a request now and then
 * (each reset the idle timer) kept them for as long as the caller liked;
 * strangers could pin most of a GiB. Now a bulk stream counts against the
 * bound like an RPC stream (the callers furthest behind are cut off past it),
 * and requests do not keep a stream whose answer has waited longer than the
 * idle limit. Real libp2p nodes. Found by session 49's artifact review.
 */
import type { Stream } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { serveBulk } from '../src/wire/bulk.ts'
import { HeldAnswers } from '../src/wire/held-answers.ts'
import { encodeFrame } from '../src/wire/rpc.ts'
import { serveTestBulk } from './fixtures/test-bulk.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const MIB = 1024 * 1024
const CHUNK_BYTES = 2 * MIB
const BOUNDED = '/aap-test/bulk-held-bound/0.1.0'
const NODE = '/aap-test/bulk-held-node/0.1.0'
const IDLE = '/aap-test/bulk-held-idle/0.1.0'

const chunk = async (): Promise<{ body: Record<string, unknown>, data: Uint8Array }> => ({ body: { bytes: CHUNK_BYTES }, data: new Uint8Array(CHUNK_BYTES) })

describe('bulk callers that ask and never read', () => {
  let nodes: MeshNode[] = []
  let B: MeshNode
  let callers: MeshNode[] = []
  const budget = new HeldAnswers(3 * MIB, silentLogger())
  const unserve: Array<() => Promise<void>> = []

  beforeAll(async () => {
    nodes = await startMesh(3)
    B = nodes[0]!
    callers = nodes.slice(1)
    unserve.push(await serveBulk(B.host, { protocol: BOUNDED, maxRequestBytes: 1024, maxPipelined: 16, maxInboundStreams: 4, handlerTimeoutMs: 5_000, log: silentLogger(), heldAnswers: budget, methods: { chunk } }))
    unserve.push(await serveTestBulk(B.host, NODE, { chunk }, { maxPipelined: 16, handlerTimeoutMs: 5_000 }))
    // far more requests than the test sends may wait: only the idle limit ends the stream
    unserve.push(await serveTestBulk(B.host, IDLE, { chunk }, { maxPipelined: 10_000, handlerTimeoutMs: 5_000, idleTimeoutMs: 300 }))
  })
  afterAll(async () => {
    for (const u of unserve) await u()
    await stopAll(nodes)
  })

  /** A stream to B that asks for `n` chunks and reads nothing. */
  async function unread (from: MeshNode, protocol: string, n: number, firstId = 1): Promise<Stream> {
    const stream = await from.host.dialProtocol(B.host.peerId, protocol, { signal: AbortSignal.timeout(5_000) })
    stream.pause()
    for (let i = 0; i < n; i++) stream.send(encodeFrame({ id: firstId + i, type: 'chunk', body: {} }))
    return stream
  }

  it('are cut off by the node\'s bound on unread answers, furthest behind first', async () => {
    const streams: Stream[] = []
    for (const c of callers) for (let s = 0; s < 4; s++) streams.push(await unread(c, BOUNDED, 2))
    await until(() => budget.stats.shed > 0, 'the bound to cut off callers that do not read')
    await until(() => budget.bytes <= budget.maxBytes, 'what is held to be back under the bound')
    await until(() => streams.filter(s => s.status !== 'open').length >= budget.stats.shed, 'the callers cut off to see their streams end')
    expect(budget.stats.shedBytes).toBeGreaterThan(0)
  })

  it('are counted in the bound of the node that serves them by default', async () => {
    const stream = await unread(callers[0]!, NODE, 2)
    await until(() => B.heldAnswers.streams > 0 && B.heldAnswers.bytes >= CHUNK_BYTES, 'the node to count what the stream holds')
    stream.abort(new Error('done'))
    await until(() => B.heldAnswers.bytes === 0, 'a closed stream to be forgotten')
  })

  it('are closed as idle though they keep asking', async () => {
    const stream = await unread(callers[0]!, IDLE, 1)
    let id = 2
    // a request every 100 ms, under the idle limit (300 ms): it used to keep the stream open for ever
    const asking = setInterval(() => {
      if (stream.status === 'open' && stream.writeStatus === 'writable') stream.send(encodeFrame({ id: id++, type: 'chunk', body: {} }))
    }, 100)
    try {
      await until(() => stream.status !== 'open', 'the responder to end a stream whose answer waited past the idle limit')
    } finally {
      clearInterval(asking)
    }
    expect(id).toBeGreaterThan(2)
  })
})
