/**
 * The chunks kept of a failed fetch (kept.ts) never make a write fail with STORAGE_FULL (protocols/artifact.md,
 * "Storage"): they go when a write needs room that evicting copies does not make. Two holes, found by the review of
 * session 50's changes:
 *  - writes that need room at once (a fetch stages up to ARTIFACT_FETCH_WINDOW_CHUNKS chunks together): the first
 *    one's `spare` emptied the kept set, whose chunks the store counts until their removal ends; the next one's
 *    `spare` found nothing kept, said so, and its write failed with STORAGE_FULL;
 *  - a commit reserved its manifest's room by evicting copies only, never asking `spare`: an upload or a fetch
 *    whose chunks fit but whose manifest needs the kept chunks' room failed.
 */
import { afterEach, describe, expect, it } from 'vitest'
import { ARTIFACT_CHUNK_BYTES } from '../src/constants.ts'
import { JSON_CODEC, RAW_CODEC, cidOf, encodeManifest, type Manifest } from '../src/artifacts/manifest.ts'
import { KeptFetches } from '../src/artifacts/kept.ts'
import type { ArtifactStore } from '../src/artifacts/store.ts'
import { silentLogger } from '../src/logger.ts'
import { TempStores } from './fixtures/artifact-stores.ts'

const stores = new TempStores()
afterEach(async () => { await stores.cleanup() })

const ROOM = 10_000
const KEPT = 4_000

function bytes (n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n)
  for (let i = 0; i < n; i++) b[i] = (seed * 31 + i * 7) & 0xff
  return b
}

async function * once (b: Uint8Array): AsyncGenerator<Uint8Array> {
  yield b
}

/** A manifest naming `chunks`, and its id. */
function manifestOf (chunks: Uint8Array[]): { id: string, bytes: Uint8Array } {
  const m: Manifest = { v: 1, size: chunks.reduce((n, c) => n + c.byteLength, 0), chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: chunks.map(c => cidOf(RAW_CODEC, c).toString()) }
  const mb = encodeManifest(m)
  return { id: cidOf(JSON_CODEC, mb).toString(), bytes: mb }
}

/**
 * A store of ROOM bytes holding a failed fetch's KEPT bytes of chunks (kept, as the service keeps them) and a
 * pinned upload of `pinned` bytes: no copy to evict, so only the kept chunks can make room.
 */
async function scene (pinned: number): Promise<{ store: ArtifactStore, kept: KeptFetches }> {
  const store = await stores.open(ROOM)
  const kept = new KeptFetches(store, silentLogger())
  store.spare = async () => await kept.dropAll()
  const have = bytes(KEPT, 1)
  const m: Manifest = { v: 1, size: 2 * KEPT, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: [cidOf(RAW_CODEC, have).toString(), cidOf(RAW_CODEC, bytes(KEPT, 2)).toString()] }
  const mb = encodeManifest(m)
  const w = await store.begin()
  await store.stage(w, m.chunks[0] ?? '', have)
  await kept.keep(cidOf(JSON_CODEC, mb).toString(), { w, manifest: { m, bytes: mb } })
  expect(kept.heldBytes).toBe(KEPT)
  await store.put(once(bytes(pinned, 3)))
  return { store, kept }
}

describe('the chunks kept of a failed fetch and a write that needs their room', () => {
  it('chunks staged at once all fit once the kept chunks go, though only the first write found them kept', async () => {
    const { store, kept } = await scene(5_000)
    expect(store.capacity - store.used).toBeLessThan(1_000)
    const w = await store.begin()
    const chunks = [10, 11, 12, 13].map(seed => bytes(1_000, seed))
    const results = await Promise.allSettled(chunks.map(async c => { await store.stage(w, cidOf(RAW_CODEC, c).toString(), c) }))
    expect(results.map(r => r.status === 'fulfilled' ? 'staged' : (r.reason as Error).message)).toEqual(['staged', 'staged', 'staged', 'staged'])
    expect(kept.heldBytes).toBe(0)
    expect(kept.stats.dropped).toBe(1)
    expect(store.used).toBeLessThanOrEqual(store.capacity)
    await store.abandon(w)
  })

  it('an upload whose manifest fits only without the kept chunks is stored', async () => {
    const { store, kept } = await scene(5_000)
    // the upload's one chunk takes the room left to the byte: its manifest needs the kept chunks' room
    const free = store.capacity - store.used
    const result = await store.put(once(bytes(free, 20))).then(r => r.size, (e: unknown) => (e as Error).message)
    expect(result).toBe(free)
    expect(kept.heldBytes).toBe(0)
    expect(store.used).toBeLessThanOrEqual(store.capacity)
  })

  it('a fetched copy whose manifest fits only without the kept chunks is committed', async () => {
    const { store, kept } = await scene(5_000)
    const chunk = bytes(store.capacity - store.used, 30)
    const { id, bytes: mb } = manifestOf([chunk])
    const w = await store.begin()
    await store.stage(w, cidOf(RAW_CODEC, chunk).toString(), chunk)
    const result = await store.commit(w, id, mb).then(() => 'committed', (e: unknown) => (e as Error).message)
    expect(result).toBe('committed')
    expect(store.holds(id)).toEqual({ pinned: false })
    expect(kept.heldBytes).toBe(0)
  })

  it('the kept chunks stay when evicting a copy makes the room', async () => {
    const store = await stores.open(ROOM)
    const kept = new KeptFetches(store, silentLogger())
    store.spare = async () => await kept.dropAll()
    // a fetched copy (unpinned) of 3,000 bytes, then a failed fetch's KEPT bytes
    const copy = bytes(3_000, 40)
    const c = manifestOf([copy])
    const cw = await store.begin()
    await store.stage(cw, cidOf(RAW_CODEC, copy).toString(), copy)
    await store.commit(cw, c.id, c.bytes)
    const have = bytes(KEPT, 41)
    const m: Manifest = { v: 1, size: 2 * KEPT, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: [cidOf(RAW_CODEC, have).toString(), cidOf(RAW_CODEC, bytes(KEPT, 42)).toString()] }
    const mb = encodeManifest(m)
    const kw = await store.begin()
    await store.stage(kw, m.chunks[0] ?? '', have)
    await kept.keep(cidOf(JSON_CODEC, mb).toString(), { w: kw, manifest: { m, bytes: mb } })
    // an upload whose chunk fits to the byte: its manifest's room comes from the copy, not from the kept chunks
    const up = await store.put(once(bytes(store.capacity - store.used, 43)))
    expect(store.holds(up.id)).toEqual({ pinned: true })
    expect(store.holds(c.id)).toBeUndefined()
    expect(kept.heldBytes).toBe(KEPT)
  })
})
