/**
 * A fetch from an honest holder on a slow link. The fetcher keeps a window of
 * ARTIFACT_FETCH_WINDOW_CHUNKS (8) chunk requests in flight, and each answer
 * used to be timed from its own request: the eighth had to arrive within
 * ARTIFACT_CHUNK_TIMEOUT_MS of the first request, behind seven chunks, so a
 * link slower than 8 chunks per timeout (~4.5 Mbit/s at 15 s) could never
 * fetch an artifact of more than ~8 MiB. Now each answer is timed from the
 * answer before it. Found by session 49's artifact review.
 *
 * The timeout is made short (4 s) and the holder's link carries one chunk
 * every 800 ms: the window's last answer comes 6.4 s after its request, each
 * answer 800 ms after the one before (3.2 s to spare for a busy machine; at
 * 1.5 s and 300 ms one stall of 1.2 s failed the only holder).
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'

vi.mock('../src/constants.ts', async (orig) => ({ ...(await orig<typeof import('../src/constants.ts')>()), ARTIFACT_CHUNK_TIMEOUT_MS: 4_000 }))

const { ARTIFACT_PROTOCOL } = await import('../src/constants.ts')
const { silentLogger } = await import('../src/logger.ts')
const { serveBulk } = await import('../src/wire/bulk.ts')
const { startMesh, stopAll } = await import('./helpers.ts')
type MeshNode = import('../src/node.ts').MeshNode

const MIB = 1024 * 1024
/** The simulated link's time per chunk: a fifth of the (mocked) timeout; the window of 8 takes 1.6 times it. */
const LINK_MS_PER_CHUNK = 800

describe('a fetch from an honest holder on a slow link', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, H: MeshNode
  let served = 0
  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, H] = nodes as [MeshNode, MeshNode]
    // H serves its own store through a link that carries one chunk per LINK_MS_PER_CHUNK (answers are made in turn)
    await H.host.unhandle(ARTIFACT_PROTOCOL)
    await serveBulk(H.host, {
      protocol: ARTIFACT_PROTOCOL, maxRequestBytes: 4096, maxPipelined: 16, maxInboundStreams: 4, handlerTimeoutMs: 30_000, log: silentLogger(),
      methods: {
        manifest: async (body) => {
          const bytes = await H.artifacts.store.manifestBytes(String(body.artifact))
          if (bytes === undefined) throw new Error('no such artifact')
          return { body: { artifact: String(body.artifact) }, data: bytes }
        },
        chunk: async (body) => {
          const m = await H.artifacts.store.manifest(String(body.artifact))
          const bytes = m === undefined ? undefined : await H.artifacts.store.chunk(m.chunks[Number(body.index)] ?? '')
          if (bytes === undefined) throw new Error('no such chunk')
          await new Promise(resolve => setTimeout(resolve, LINK_MS_PER_CHUNK))
          served++
          return { body: { artifact: String(body.artifact), index: Number(body.index) }, data: bytes }
        }
      }
    })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('gets an artifact larger than the window, each chunk within the timeout of the one before', async () => {
    const data = new Uint8Array(10 * MIB)
    // every chunk its own bytes: a chunk repeated in the manifest is fetched once (session 56)
    for (let i = 0; i < data.length; i += 4096) data[i] = (i / 4096 + Math.floor(i / MIB)) & 0xff
    const part = await H.artifacts.put(data, { media_type: 'application/octet-stream' })
    const got = await A.artifacts.fetch(part.artifact, { holders: [H.agentId] }).then(m => m.size, (e: { code?: string, message?: string }) => `${e.code ?? ''}: ${e.message ?? ''}`)
    expect(got).toBe(10 * MIB)
    expect(served).toBe(10)
    expect(A.artifacts.store.holds(part.artifact)).toEqual({ pinned: false })
  }, 60_000)
})
