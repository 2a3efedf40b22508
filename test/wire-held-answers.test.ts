/**
 * Guards the bound on answers a responder holds for a caller that does not read (src/wire/responder.ts pump,
 * hasRoom): protocols/README.md promises such a caller keeps its requests in its own send window, not answers in
 * the responder's memory. The responder started every request of a chunk (up to MAX_PIPELINED_REQUESTS_PER_STREAM)
 * before its stream reported full, and queued every answer they made (a review: 64 events sync pages, 61.7 MB
 * for one stream). Now it starts no handler that could take the answers it holds past
 * RESPONDER_HELD_ANSWER_MAX_BYTES, counting each request in progress as an answer of the protocol's frame
 * limit, and goes on as the caller reads. An answer past that limit (no caller would read it) is not sent: the
 * caller gets INTERNAL (answer_oversized) instead.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Stream } from '@libp2p/interface'
import { MAX_PIPELINED_REQUESTS_PER_STREAM } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { RESPONDER_HELD_ANSWER_MAX_BYTES } from '../src/wire/network-constants.ts'
import { encodeFrame, serve } from '../src/wire/rpc.ts'
import { pipelinedRequests, RawWire } from './fixtures/raw-wire.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const PROTO = '/aap-test/held-answers/0.1.0'
const ANSWER_BYTES = 256 * 1024
const FRAME_BYTES = 512 * 1024
const WATCH_MS = 1_500

describe('answers held for a caller that does not read', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let unserve: () => Promise<void>
  let handled = 0
  const big = 'x'.repeat(ANSWER_BYTES)
  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    unserve = await serve(B.host, {
      protocol: PROTO,
      maxFrameBytes: FRAME_BYTES,
      // a small request, a large answer
      methods: {
        page: { handle: async () => { handled++; return { data: big } } },
        huge: { handle: async () => ({ data: 'y'.repeat(FRAME_BYTES) }) }
      }
    })
  })
  afterAll(async () => {
    await unserve()
    await stopAll(nodes)
  })

  it('holds at most RESPONDER_HELD_ANSWER_MAX_BYTES of answers, and answers everything once the caller reads', async () => {
    const wire = await RawWire.open(A.host, B.host.peerId, PROTO)
    const inbound = (): Stream | undefined =>
      B.host.getConnections(A.host.peerId).flatMap(c => c.streams).find(s => s.protocol === PROTO && s.direction === 'inbound')
    try {
      wire.stream.pause()
      // every request in one chunk
      const chunk = pipelinedRequests(MAX_PIPELINED_REQUESTS_PER_STREAM, 'page')
      wire.write(chunk)
      await until(() => inbound()?.writableNeedsDrain === true, 'B to wait for A to read')
      // watch B's buffered answers for a while (bounded poll): with the fault they grew to all 64 (16 MiB)
      let most = 0
      const t0 = Date.now()
      await until(() => { most = Math.max(most, inbound()?.writeBufferLength ?? 0); return Date.now() - t0 > WATCH_MS }, 'watching B')
      expect(most).toBeGreaterThan(0)
      expect(most).toBeLessThanOrEqual(RESPONDER_HELD_ANSWER_MAX_BYTES)
      expect(handled).toBeLessThan(MAX_PIPELINED_REQUESTS_PER_STREAM)
      // once A reads, B handles the rest: every request is answered
      wire.stream.resume()
      const ids = new Set<number | null>()
      for (let i = 0; i < MAX_PIPELINED_REQUESTS_PER_STREAM; i++) {
        const answer = await wire.next()
        expect(answer.ok).toBe(true)
        expect((answer.body?.data as string).length).toBe(ANSWER_BYTES)
        ids.add(answer.id)
      }
      expect(ids.size).toBe(MAX_PIPELINED_REQUESTS_PER_STREAM)
      expect(handled).toBe(MAX_PIPELINED_REQUESTS_PER_STREAM)
    } finally {
      wire.abort()
    }
  })

  it('sends no answer past the frame limit: the caller is told why instead', async () => {
    const wire = await RawWire.open(A.host, B.host.peerId, PROTO)
    try {
      wire.write(encodeFrame({ id: 7, type: 'huge', body: {} }))
      expect(await wire.next()).toMatchObject({ id: 7, ok: false, error: { code: 'INTERNAL', details: { reason: 'answer_oversized', max_bytes: FRAME_BYTES } } })
      // the stream goes on
      wire.write(encodeFrame({ id: 8, type: 'page', body: {} }))
      expect(await wire.next()).toMatchObject({ id: 8, ok: true })
    } finally {
      wire.abort()
    }
  })
})
