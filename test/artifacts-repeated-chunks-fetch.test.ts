/**
 * A chunk a manifest names at several indexes is fetched once. The fetcher
 * asked for every index, so an artifact of 32 identical 1 MiB chunks (1 MiB
 * on either node's disk) cost 32 MiB on the wire, and its holder's rate bound
 * was sized for 32 MiB too. Found by session 56's artifact review.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { peerIdFromString } from '@libp2p/peer-id'
import { ARTIFACT_FETCH_MIN_BYTES_PER_SEC, ARTIFACT_FETCH_RATE_GRACE_MS } from '../src/artifacts/constants.ts'
import { rateBound } from '../src/artifacts/fetch-bounds.ts'
import { cidOf, encodeManifest, JSON_CODEC, RAW_CODEC, verifyManifest, type Manifest } from '../src/artifacts/manifest.ts'
import { ARTIFACT_CHUNK_BYTES } from '../src/constants.ts'
import { ArtifactCorruptError } from '../src/errors.ts'
import type { MeshNode } from '../src/node.ts'
import type { BulkSession } from '../src/wire/bulk.ts'
import { startMesh, stopAll } from './helpers.ts'

const MIB = 1024 * 1024
const CHUNKS = 32

/** 32 chunks of the same 1 MiB. */
function repeated (): Uint8Array {
  const chunk = new Uint8Array(ARTIFACT_CHUNK_BYTES)
  for (let i = 0; i < chunk.length; i += 4096) chunk[i] = (i / 4096) & 0xff
  const data = new Uint8Array(CHUNKS * ARTIFACT_CHUNK_BYTES)
  for (let c = 0; c < CHUNKS; c++) data.set(chunk, c * ARTIFACT_CHUNK_BYTES)
  return data
}

describe('an artifact of 32 identical chunks between two nodes over TCP', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  beforeAll(async () => {
    expect(ARTIFACT_CHUNK_BYTES).toBe(MIB)
    nodes = await startMesh(2, { transport: 'tcp' })
    ;[A, B] = nodes as [MeshNode, MeshNode]
  })
  afterAll(async () => { await stopAll(nodes) })

  it('is fetched as one chunk, and reads back whole', async () => {
    const data = repeated()
    const part = await A.artifacts.put(data, { media_type: 'application/octet-stream' })
    const served = A.artifacts.stats.chunksServed
    const m = await B.artifacts.fetch(part.artifact, { holders: [A.agentId] })
    expect(m.chunks.length).toBe(CHUNKS)
    expect(A.artifacts.stats.chunksServed - served).toBe(1)
    expect(B.artifacts.stats.chunksFetched).toBe(1)
    const read: Uint8Array[] = []
    for await (const c of (await B.artifacts.open(part.artifact)).chunks) read.push(c)
    expect(Buffer.concat(read).equals(Buffer.from(data))).toBe(true)
  })
})

describe('the rate bound of a holder asked for a repeated chunk', () => {
  afterEach(() => { vi.useRealTimers() })

  it('is sized by the distinct bytes missing, not by every index', () => {
    vi.useFakeTimers()
    const chunk = cidOf(RAW_CODEC, new Uint8Array(ARTIFACT_CHUNK_BYTES)).toString()
    const m: Manifest = { v: 1, size: CHUNKS * ARTIFACT_CHUNK_BYTES, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: Array(CHUNKS).fill(chunk) }
    const aborted: unknown[] = []
    const session = { abort: (err: unknown) => { aborted.push(err) } } as unknown as BulkSession
    const peer = peerIdFromString('12D3KooWGRUVh7bAMKjd5N5NE6Ssd4nA8rk9cqLBnqWjDxoNYbZx')
    const bound = rateBound(session, peer, m, [], () => {})
    vi.advanceTimersByTime(ARTIFACT_FETCH_RATE_GRACE_MS + Math.ceil(ARTIFACT_CHUNK_BYTES * 1000 / ARTIFACT_FETCH_MIN_BYTES_PER_SEC) + 1)
    bound.clear()
    expect(aborted).toHaveLength(1)
    expect(bound.err?.details).toMatchObject({ reason: 'too_slow', bytes: ARTIFACT_CHUNK_BYTES })
  })
})

describe('a manifest that names one chunk at a full index and at a shorter last one', () => {
  it('is refused as ARTIFACT_CORRUPT (bad_manifest): the chunk is fetched once and cannot have both lengths', () => {
    // a hostile holder's manifest: with a repeated chunk fetched once, it would have been stored, and read back corrupt
    const chunk = cidOf(RAW_CODEC, new Uint8Array(ARTIFACT_CHUNK_BYTES)).toString()
    const bytes = encodeManifest({ v: 1, size: ARTIFACT_CHUNK_BYTES + 10, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: [chunk, chunk] })
    let err: unknown
    try {
      verifyManifest(cidOf(JSON_CODEC, bytes), bytes)
    } catch (e) {
      err = e
    }
    expect(err).toBeInstanceOf(ArtifactCorruptError)
    expect((err as ArtifactCorruptError).details).toMatchObject({ reason: 'bad_manifest' })
  })
})
