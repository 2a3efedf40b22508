/**
 * A stream this side gave up on goes when the peer does not end its side
 * (src/wire/stream-end.ts): closing ends only this side, so before, such a
 * stream stayed as long as the connection did, with what was buffered for
 * it (session 51's review of src/wire). On the responder: a truncated frame
 * (its partial buffer up to the protocol's frame limit) and its idle limit;
 * an honest call before it was answered. On the client: a session closed as
 * idle whose responder never ends its side.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'

vi.mock('../src/constants.ts', async (orig) => ({ ...(await orig<typeof import('../src/constants.ts')>()), STREAM_IDLE_TIMEOUT_MS: 500 }))

const { FrameDecoder, RpcClient, encodeFrame, serve } = await import('../src/wire/rpc.ts')
const { RawWire, lengthPrefix } = await import('./fixtures/raw-wire.ts')
const { startMesh, stopAll, until } = await import('./helpers.ts')
type MeshNode = Awaited<ReturnType<typeof startMesh>>[number]

const P = '/aap-test/half-closed/0.1.0'
const NEVER_ENDS = '/aap-test/never-ends/0.1.0'

describe('a stream the responder gave up on, whose caller never ends its side', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let unserve: () => Promise<void>
  const inboundOpen = (): number => B.host.getConnections(A.host.peerId).flatMap(c => c.streams).filter(s => s.protocol === P && s.direction === 'inbound' && s.status !== 'closed').length
  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    unserve = await serve(B.host, { protocol: P, maxFrameBytes: 4 * 1024 * 1024, frameTimeoutMs: 300, methods: { echo: { handle: async (b) => b as object } } })
  })
  afterAll(async () => {
    await unserve()
    await stopAll(nodes)
  })

  it('goes after a truncated frame', async () => {
    const w = await RawWire.open(A.host, B.host.peerId, P)
    const n = 1024 * 1024
    w.write(lengthPrefix(n))
    // all but the last byte, then nothing more, and the caller's side stays open
    w.write(new Uint8Array(n - 1).fill(0x20))
    const f = await w.next()
    expect(f).toMatchObject({ id: null, ok: false, error: { code: 'INVALID_REQUEST', details: { reason: 'truncated' } } })
    await until(() => inboundOpen() === 0, 'the node to let the stream go')
    w.abort()
  })

  it('goes after its idle limit, and an honest call before it was answered', async () => {
    const w = await RawWire.open(A.host, B.host.peerId, P)
    expect(await w.call({ id: 1, type: 'echo', body: { x: 1 } })).toEqual({ id: 1, ok: true, body: { x: 1 } })
    // the caller neither asks more nor ends its side
    await until(() => inboundOpen() === 0, 'the node to let the idle stream go')
    w.abort()
  })
})

describe('a client session closed as idle, whose responder never ends its side', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    // answers every request, and never closes or ends a stream
    await B.host.handle(NEVER_ENDS, (stream) => {
      const frames = new FrameDecoder(4096)
      stream.addEventListener('message', (evt) => {
        const chunk = 'subarray' in evt.data ? evt.data.subarray() : evt.data
        for (const f of frames.push(chunk)) {
          const req = JSON.parse(new TextDecoder().decode(f)) as { id: number, body: unknown }
          stream.send(encodeFrame({ id: req.id, ok: true, body: req.body }))
        }
      })
    })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('goes from the client\'s node', async () => {
    const client = new RpcClient(A.host, { protocol: NEVER_ENDS, maxFrameBytes: 4096 })
    const outboundOpen = (): number => A.host.getConnections(B.host.peerId).flatMap(c => c.streams).filter(s => s.protocol === NEVER_ENDS && s.direction === 'outbound' && s.status !== 'closed').length
    try {
      expect(await client.call(B.host.peerId, 'echo', { x: 1 })).toEqual({ x: 1 })
      expect(outboundOpen()).toBe(1)
      // idle past STREAM_IDLE_TIMEOUT_MS: the client closes its side, and the responder never ends its own
      await until(() => outboundOpen() === 0, 'the client to let the idle stream go')
    } finally {
      client.close()
    }
  })
})

