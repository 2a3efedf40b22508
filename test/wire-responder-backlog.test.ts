/**
 * A responder's requests read but not yet handled are bounded by what they
 * cost (RESPONDER_BACKLOG_MAX_BYTES, each frame at least
 * RESPONDER_FRAME_MIN_COST_BYTES): a chunk of one-byte frames is refused with
 * INVALID_REQUEST (`too_many_requests`) and dropped, not kept as a view per
 * byte. Session 51's review: 8 such streams on each protocol of one
 * connection took a stock node's heap up by 1.2 GB, held while the caller
 * read no answers. An honest pipelined burst is still answered. Also: a
 * frame's buffer is its exact size (encodeFrame), so the bounds on unread
 * answers hold the bytes they count.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CARD_PROTOCOL } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { FrameDecoder, encodeFrame } from '../src/wire/rpc.ts'
import { RawWire, pipelinedRequests, type ResponseFrame } from './fixtures/raw-wire.ts'
import { startMesh, stopAll } from './helpers.ts'

describe('a responder fed a flood of one-byte frames', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    await B.publishCard({ name: 'b', capabilities: [{ capability_id: 'cap:backlog', version: '1.0.0' }] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('breaks the stream with too_many_requests, and an honest burst on another stream is answered', async () => {
    const flood = await RawWire.open(A.host, B.host.peerId, CARD_PROTOCOL)
    // 64 KiB of zero bytes: as many zero-length frames
    flood.write(new Uint8Array(64 * 1024))
    let refusal: ResponseFrame | undefined
    for (let i = 0; i < 1_000 && refusal === undefined; i++) {
      const f = await flood.next()
      if (f.error?.details?.reason === 'too_many_requests') refusal = f
    }
    expect(refusal?.id).toBeNull()
    expect(refusal?.error?.code).toBe('INVALID_REQUEST')
    flood.abort()

    const honest = await RawWire.open(A.host, B.host.peerId, CARD_PROTOCOL)
    honest.write(pipelinedRequests(200, 'get_card'))
    const answers: ResponseFrame[] = []
    for (let i = 0; i < 200; i++) answers.push(await honest.next())
    expect(answers.every(a => a.ok)).toBe(true)
    expect(new Set(answers.map(a => a.id)).size).toBe(200)
    honest.abort()
  })
})

describe('encodeFrame', () => {
  it('puts a frame in a buffer of its own size, whatever its characters', () => {
    for (const s of ['x'.repeat(1_000_000), 'é'.repeat(1_000), '😀 ok ✓']) {
      const frame = encodeFrame({ s })
      expect(frame.buffer.byteLength - frame.byteLength).toBeLessThanOrEqual(8)
      const decoded = new FrameDecoder(4 * 1024 * 1024).push(frame)
      expect(decoded).toHaveLength(1)
      expect(JSON.parse(new TextDecoder().decode(decoded[0]))).toEqual({ s })
    }
  })
})
