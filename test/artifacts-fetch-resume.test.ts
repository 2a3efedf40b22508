/**
 * A fetch that fails half way keeps the chunks it verified (kept.ts): the next fetch of the same artifact, from
 * another holder, asks only for the chunks still missing. They used to be thrown away with the failed fetch's
 * write, so a retry started from zero. Found by session 49's artifact review. The kept chunks count against the
 * store's bound, and go when a write needs room that evicting copies does not make.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ARTIFACT_CHUNK_BYTES, ARTIFACT_PROTOCOL } from '../src/constants.ts'
import { ArtifactNotFoundError } from '../src/errors.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { serveBulk } from '../src/wire/bulk.ts'
import { rejectsWith, startMesh, stopAll } from './helpers.ts'

const MIB = 1024 * 1024
const CHUNKS = 4
/** Chunks the holder that goes away serves of an artifact before it has none. */
const SERVED_BEFORE_GONE = 2

function filled (seed: number, chunks = CHUNKS): Uint8Array {
  const data = new Uint8Array(chunks * MIB)
  // every chunk its own bytes (chunks alike are stored once)
  for (let i = 0; i < data.length; i += 4096) data[i] = (seed + i / 4096 + Math.floor(i / MIB)) & 0xff
  return data
}

async function readAll (node: MeshNode, id: string): Promise<Buffer> {
  const parts: Uint8Array[] = []
  for await (const c of (await node.artifacts.open(id)).chunks) parts.push(c)
  return Buffer.concat(parts)
}

describe('a fetch that failed half way', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, G: MeshNode, H: MeshNode
  beforeAll(async () => {
    expect(ARTIFACT_CHUNK_BYTES).toBe(MIB)
    // A's store holds one artifact here and little more, so the last case needs the kept chunks' room
    nodes = await startMesh(3, { nodeOptions: i => i === 0 ? { artifactStoreMaxBytes: 6 * MIB } : {} })
    ;[A, G, H] = nodes as [MeshNode, MeshNode, MeshNode]
    // G serves the first chunks of what it holds, then answers as a holder whose copy has gone
    await G.host.unhandle(ARTIFACT_PROTOCOL)
    await serveBulk(G.host, {
      protocol: ARTIFACT_PROTOCOL, maxRequestBytes: 4096, maxPipelined: 16, maxInboundStreams: 4, handlerTimeoutMs: 30_000, log: silentLogger(),
      methods: {
        manifest: async (body) => {
          const bytes = await G.artifacts.store.manifestBytes(String(body.artifact))
          if (bytes === undefined) throw new ArtifactNotFoundError('no such artifact')
          return { body: { artifact: String(body.artifact) }, data: bytes }
        },
        chunk: async (body) => {
          const id = String(body.artifact)
          const index = Number(body.index)
          const m = await G.artifacts.store.manifest(id)
          const bytes = m === undefined || index >= SERVED_BEFORE_GONE ? undefined : await G.artifacts.store.chunk(m.chunks[index] ?? '')
          if (bytes === undefined) throw new ArtifactNotFoundError(`chunk ${index} of ${id} is gone from this node`)
          return { body: { artifact: id, index }, data: bytes }
        }
      }
    })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('is retried from another holder, which is asked only for the chunks still missing', async () => {
    const data = filled(1)
    const part = await G.artifacts.put(data, { media_type: 'application/octet-stream' })
    // G goes away after two chunks; H, a connected peer, has no copy yet
    await rejectsWith(A.artifacts.fetch(part.artifact, { holders: [G.agentId] }), 'ARTIFACT_NOT_FOUND')
    expect(A.artifacts.stats.chunksFetched).toBe(SERVED_BEFORE_GONE)
    expect(A.artifacts.store.holds(part.artifact)).toBeUndefined()
    // the verified chunks stay staged, counted against the store's bound
    const usedAfterFailure = A.artifacts.store.used

    // the same bytes, so the same id, on H
    expect((await H.artifacts.put(data, { media_type: 'application/octet-stream' })).artifact).toBe(part.artifact)
    const servedByH = H.artifacts.stats.chunksServed
    const m = await A.artifacts.fetch(part.artifact, { holders: [H.agentId] })
    expect(m.size).toBe(CHUNKS * MIB)
    expect(H.artifacts.stats.chunksServed - servedByH).toBe(CHUNKS - SERVED_BEFORE_GONE)
    expect(usedAfterFailure).toBe(SERVED_BEFORE_GONE * MIB)
    expect(A.artifacts.kept.stats).toMatchObject({ kept: 1, resumed: 1 })
    expect(A.artifacts.kept.heldBytes).toBe(0)
    // read back, each chunk verified against the manifest, byte for byte the bytes put
    expect((await readAll(A, part.artifact)).equals(data)).toBe(true)
    expect(A.artifacts.store.used).toBe(CHUNKS * MIB + (await A.artifacts.store.manifestBytes(part.artifact))!.byteLength)
  }, 60_000)

  it('gives up the kept chunks when a write needs their room', async () => {
    await A.artifacts.remove((await A.artifacts.store.list(undefined, 10))[0]!.artifact)
    expect(A.artifacts.store.used).toBe(0)
    const part = await G.artifacts.put(filled(2), { media_type: 'application/octet-stream' })
    await rejectsWith(A.artifacts.fetch(part.artifact, { holders: [G.agentId] }), 'ARTIFACT_NOT_FOUND')
    expect(A.artifacts.kept.heldBytes).toBe(SERVED_BEFORE_GONE * MIB)
    const dropped = A.artifacts.kept.stats.dropped
    // 2 MiB kept and 5 MiB more pass the 6 MiB bound, and there is no copy to evict
    const upload = await A.artifacts.put(filled(3, 5), { media_type: 'application/octet-stream' })
    expect(A.artifacts.store.holds(upload.artifact)).toEqual({ pinned: true })
    expect(A.artifacts.kept.heldBytes).toBe(0)
    expect(A.artifacts.kept.stats.dropped).toBe(dropped + 1)
  }, 60_000)
})
