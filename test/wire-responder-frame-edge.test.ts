/**
 * A protocol's frame limit bounds N, the length of a frame's JSON body
 * (protocols/README.md, "Frames"), not N with its length prefix: the
 * responder sends an answer of exactly the limit, which the caller's decoder
 * takes (len <= max). It refused it before (INTERNAL, answer_oversized, "the
 * answer (1026 bytes)"), counting the prefix. One byte more is still refused.
 * Real libp2p nodes; the protocol is served with serve().
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { RpcClient, serve } from '../src/wire/rpc.ts'
import { startMesh, stopAll } from './helpers.ts'

const PROTOCOL = '/aap-test/frame-edge/0.1.0'
const MAX_FRAME_BYTES = 1024
const ID = 1

/** A body whose answer frame `{id, ok, body}` is exactly `bytes` long (ASCII). */
function bodyOfAnswer (bytes: number): Record<string, unknown> {
  const bare = JSON.stringify({ id: ID, ok: true, body: { pad: '' } }).length
  return { pad: 'x'.repeat(bytes - bare) }
}

describe('an answer at the protocol\'s frame limit', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let unserve: (() => Promise<void>) | undefined

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    unserve = await serve(B.host, {
      protocol: PROTOCOL,
      maxFrameBytes: MAX_FRAME_BYTES,
      log: silentLogger(),
      methods: {
        sized: { handle: async (body) => bodyOfAnswer(Number((body as { bytes: number }).bytes)) },
        // a handler's bug: an answer JSON cannot carry
        unencodable: { handle: async () => ({ n: 1n }) }
      }
    })
  })
  afterAll(async () => {
    await unserve?.()
    await stopAll(nodes)
  })

  it('is sent and read when its body is exactly the limit, refused one byte past it', async () => {
    const client = new RpcClient(A.host, { protocol: PROTOCOL, maxFrameBytes: MAX_FRAME_BYTES, maxStreamsPerPeer: 1 })
    try {
      const opts = { responseTimeoutMs: 10_000, callTimeoutMs: 10_000 }
      const exact = bodyOfAnswer(MAX_FRAME_BYTES)
      // the first call on the stream has id 1, as bodyOfAnswer assumes
      expect(await client.call(B.host.peerId, 'sized', { bytes: MAX_FRAME_BYTES }, opts)).toEqual(exact)
      const over = client.call(B.host.peerId, 'sized', { bytes: MAX_FRAME_BYTES + 1 }, opts)
      await expect(over).rejects.toMatchObject({ code: 'INTERNAL', details: { reason: 'answer_oversized', max_bytes: MAX_FRAME_BYTES } })
    } finally {
      client.close()
    }
  })


  it('an answer JSON cannot carry is an INTERNAL error frame to the caller, and the responder goes on', async () => {
    const client = new RpcClient(A.host, { protocol: PROTOCOL, maxFrameBytes: MAX_FRAME_BYTES, maxStreamsPerPeer: 1 })
    try {
      const opts = { responseTimeoutMs: 10_000, callTimeoutMs: 10_000 }
      // before: encoding threw in the handler's callback, an unhandled rejection (which ends a Node process), and the
      // caller heard nothing until its own timeout
      await expect(client.call(B.host.peerId, 'unencodable', {}, opts)).rejects.toMatchObject({ code: 'INTERNAL', message: 'internal error' })
      expect(await client.call(B.host.peerId, 'sized', { bytes: 100 }, opts)).toEqual(bodyOfAnswer(100))
    } finally {
      client.close()
    }
  })
})
