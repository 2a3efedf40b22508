/**
 * Two findings of session 58's artifact review.
 *
 * A chunk this node holds already has one length. A fetch used to count it as held wherever a manifest placed it,
 * so a hostile holder could serve a manifest (under its right id) that puts a stored 1 MiB chunk where 5 bytes
 * belong: nothing was fetched, the artifact was committed whole, and it failed only when read (protocols/artifact.md,
 * "Content addressing": every chunk's length must be the one its place implies). Now the fetch refuses the manifest
 * (ARTIFACT_CORRUPT, `bad_manifest`) and commits nothing; the store's commit refuses such a manifest too.
 *
 * A chunk a node serves is a use of its copy ("What stays"): it used to keep its old place in the eviction order,
 * since only a manifest request touched it, and a fetcher resuming a kept fetch asks for chunks only.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ARTIFACT_CHUNK_BYTES, ARTIFACT_PROTOCOL } from '../src/constants.ts'
import { JSON_CODEC, cidOf, encodeManifest } from '../src/artifacts/manifest.ts'
import { ArtifactNotFoundError } from '../src/errors.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { serveBulk } from '../src/wire/bulk.ts'
import { rawCall } from '../src/wire/raw.ts'
import { rejectsWith, startMesh, stopAll } from './helpers.ts'

const MIB = 1024 * 1024
const octets = { media_type: 'application/octet-stream' }

describe('a manifest that places a chunk held here at another length', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let chunk: string
  let chunkBytes: Uint8Array
  let x: string
  let xBytes: Uint8Array
  beforeAll(async () => {
    expect(ARTIFACT_CHUNK_BYTES).toBe(MIB)
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    chunkBytes = new Uint8Array(MIB).fill(7)
    const y = await A.artifacts.put(chunkBytes, octets)
    chunk = (await A.artifacts.local(y.artifact))!.chunks[0]!
    // a manifest of 5 bytes whose one chunk is the 1 MiB chunk A holds, under its right id
    xBytes = encodeManifest({ v: 1, size: 5, chunk_bytes: MIB, chunks: [chunk] })
    x = cidOf(JSON_CODEC, xBytes).toString()
    // B, hostile, serves that manifest, and the chunk if asked
    await B.host.unhandle(ARTIFACT_PROTOCOL)
    await serveBulk(B.host, {
      protocol: ARTIFACT_PROTOCOL, maxRequestBytes: 4096, maxPipelined: 16, maxInboundStreams: 4, handlerTimeoutMs: 30_000, log: silentLogger(),
      methods: {
        manifest: async (body) => {
          if (String(body.artifact) !== x) throw new ArtifactNotFoundError('no such artifact')
          return { body: { artifact: x }, data: xBytes }
        },
        chunk: async (body) => ({ body: { artifact: x, index: Number(body.index) }, data: chunkBytes })
      }
    })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('fails the fetch with ARTIFACT_CORRUPT (bad_manifest) and commits nothing', async () => {
    const rejected = A.artifacts.stats.rejected
    const err = await rejectsWith(A.artifacts.fetch(x, { holders: [B.agentId] }), 'ARTIFACT_CORRUPT')
    expect(err.details).toMatchObject({ reason: 'bad_manifest', artifact: x, index: 0, bytes: MIB, expected: 5 })
    expect(A.artifacts.store.holds(x)).toBeUndefined()
    expect(await A.artifacts.local(x)).toBeUndefined()
    expect(A.artifacts.stats.rejected).toBeGreaterThan(rejected)
    // the artifact that holds the chunk rightly is still whole
    expect(A.artifacts.store.hasChunk(chunk)).toBe(true)
  })

  it('is refused by the store\'s commit too, with nothing committed', async () => {
    const store = A.artifacts.store
    const used = store.used
    const w = await store.begin()
    expect(store.hasChunk(chunk, w)).toBe(true)
    const err = await rejectsWith(store.commit(w, x, xBytes), 'ARTIFACT_CORRUPT')
    expect(err.details).toMatchObject({ reason: 'bad_manifest', index: 0, bytes: MIB, expected: 5 })
    expect(store.holds(x)).toBeUndefined()
    expect(store.used).toBe(used)
    expect(store.hasChunk(chunk)).toBe(true)
  })
})

describe('a chunk served to a peer', () => {
  const SIZE = 3000
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  beforeAll(async () => {
    // B's store holds two copies of SIZE bytes and their manifests, not a third artifact besides
    nodes = await startMesh(2, { nodeOptions: i => i === 1 ? { artifactStoreMaxBytes: 2 * (SIZE + 200) + 1000 } : {} })
    ;[A, B] = nodes as [MeshNode, MeshNode]
  })
  afterAll(async () => { await stopAll(nodes) })

  it('is a use of its copy: the copy is not the first to be evicted after it', async () => {
    const first = await A.artifacts.put(new Uint8Array(SIZE).fill(1), octets)
    const second = await A.artifacts.put(new Uint8Array(SIZE).fill(2), octets)
    await B.artifacts.fetch(first.artifact, { holders: [A.agentId] })
    await B.artifacts.fetch(second.artifact, { holders: [A.agentId] })
    expect(B.artifacts.store.holds(first.artifact)).toEqual({ pinned: false })
    expect(B.artifacts.store.holds(second.artifact)).toEqual({ pinned: false })
    // the first copy is the least recently used; A asks B for one of its chunks only (as a resumed fetch does)
    const served = B.artifacts.stats.chunksServed
    const answer = await rawCall(A.host, B.host.peerId, ARTIFACT_PROTOCOL, 'chunk', { artifact: first.artifact, index: 0 })
    expect(answer).toMatchObject({ ok: true, body: { artifact: first.artifact, index: 0 } })
    expect(B.artifacts.stats.chunksServed).toBe(served + 1)
    // B stores an artifact of its own that needs one copy's room: the one not used since goes
    await B.artifacts.put(new Uint8Array(SIZE).fill(3), octets)
    expect(B.artifacts.store.stats.evicted).toBe(1)
    expect(B.artifacts.store.holds(first.artifact)).toEqual({ pinned: false })
    expect(B.artifacts.store.holds(second.artifact)).toBeUndefined()
  })
})
