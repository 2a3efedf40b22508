/**
 * A bulk stream one side closed goes when the other never ends its side
 * (src/wire/stream-end.ts): in libp2p 3 closing ends only this side, so
 * before, such a stream stayed as long as the connection did, with its
 * decoder or reader. On the responder: a stream closed as idle after an
 * answer, and one closed as broken after a bad frame. On the caller: a
 * session closed by its owner whose responder never ends its side.
 * Real libp2p nodes; the peer that never ends is a raw stream.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { BulkSession } from '../src/wire/bulk.ts'
import { FrameDecoder, encodeFrame } from '../src/wire/rpc.ts'
import { serveTestBulk } from './fixtures/test-bulk.ts'
import { RawWire, rawFrame } from './fixtures/raw-wire.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const BULK = '/aap-test/bulk-half-closed/0.1.0'
const NEVER_ENDS = '/aap-test/bulk-never-ends/0.1.0'

/** Streams of `protocol` that `on` holds with `peer`, in `direction`, not yet closed both ways. */
function openStreams (on: MeshNode, peer: MeshNode, protocol: string, direction: 'inbound' | 'outbound'): number {
  return on.host.getConnections(peer.host.peerId).flatMap(c => c.streams).filter(s => s.protocol === protocol && s.direction === direction && s.status !== 'closed').length
}

describe('a bulk stream the responder closed, whose caller never ends its side', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let unserve: (() => Promise<void>) | undefined

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    unserve = await serveTestBulk(B.host, BULK, {
      echo: async (body) => ({ body })
    }, { maxPipelined: 4, handlerTimeoutMs: 5_000, idleTimeoutMs: 200 })
  })
  afterAll(async () => {
    await unserve?.()
    await stopAll(nodes)
  })

  it('goes once closed as idle after an answer', async () => {
    const w = await RawWire.open(A.host, B.host.peerId, BULK)
    try {
      expect(await w.call({ id: 1, type: 'echo', body: { x: 1 } })).toEqual({ id: 1, ok: true, body: { x: 1 } })
      // the caller neither asks more nor ends its side: idle (200 ms), the responder closes its side, then aborts
      await w.ended
      await until(() => openStreams(B, A, BULK, 'inbound') === 0, 'the responder to let the idle stream go')
    } finally {
      w.abort()
    }
  })

  it('goes once closed as broken after a bad frame', async () => {
    const w = await RawWire.open(A.host, B.host.peerId, BULK)
    try {
      // a request frame past the protocol's 1024 bytes
      w.write(rawFrame(new Uint8Array(4096).fill(0x20)))
      expect(await w.next()).toMatchObject({ id: null, ok: false, error: { code: 'INVALID_REQUEST' } })
      await until(() => openStreams(B, A, BULK, 'inbound') === 0, 'the responder to let the broken stream go')
    } finally {
      w.abort()
    }
  })
})

describe('a bulk session closed by its owner, whose responder never ends its side', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    // answers every request, and never closes or ends a stream
    await B.host.handle(NEVER_ENDS, (stream) => {
      const frames = new FrameDecoder(4096)
      stream.addEventListener('message', (evt) => {
        const chunk = evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()
        for (const f of frames.push(chunk)) {
          const req = JSON.parse(new TextDecoder().decode(f)) as { id: number, body: unknown }
          stream.send(encodeFrame({ id: req.id, ok: true, body: req.body }))
        }
      })
    })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('goes from the caller\'s node', async () => {
    const session = await BulkSession.open(A.host, B.host.peerId, NEVER_ENDS, { maxFrameBytes: 4096, log: silentLogger() })
    try {
      expect(await session.request('echo', { x: 1 }, 5_000)).toEqual({ body: { x: 1 } })
      expect(openStreams(A, B, NEVER_ENDS, 'outbound')).toBe(1)
      await session.close()
      await until(() => openStreams(A, B, NEVER_ENDS, 'outbound') === 0, 'the caller to let the half-closed stream go')
    } finally {
      session.abort(new Error('test over'))
    }
  })
})
