/**
 * A stream the responder gave up on (its idle limit, a truncated frame) goes
 * when the caller does not end its side: closing ends only the responder's
 * side, so before, such a stream, and the partial frame buffered for it (up
 * to the protocol's frame limit), stayed as long as the connection did
 * (session 51's review of src/wire). An honest caller that ends its side
 * after the responder's is not cut short: its answers came before.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'

vi.mock('../src/constants.ts', async (orig) => ({ ...(await orig<typeof import('../src/constants.ts')>()), STREAM_IDLE_TIMEOUT_MS: 500 }))

const { serve } = await import('../src/wire/rpc.ts')
const { RawWire, lengthPrefix } = await import('./fixtures/raw-wire.ts')
const { startMesh, stopAll, until } = await import('./helpers.ts')
type MeshNode = Awaited<ReturnType<typeof startMesh>>[number]

const P = '/aap-test/half-closed/0.1.0'

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
