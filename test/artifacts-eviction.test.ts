/**
 * The artifact store frees room (src/artifacts/store.ts, catalog.ts). Until
 * session 44 nothing ever left it: a node that had stored or fetched
 * ARTIFACT_STORE_MAX_BYTES refused every artifact after that with
 * STORAGE_FULL, for good. Now copies fetched from peers are evicted least
 * recently used first when a write needs room (never the node's own, pinned
 * artifacts, nor one being read), and any artifact can be removed on
 * purpose; a chunk leaves only when no manifest names it and no write in
 * progress counts on it.
 */
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { ARTIFACT_CHUNK_BYTES } from '../src/constants.ts'
import { ArtifactStore, type RemovedBy } from '../src/artifacts/store.ts'
import { JSON_CODEC, RAW_CODEC, cidOf, encodeManifest } from '../src/artifacts/manifest.ts'
import { ARTIFACT_USE_PERSIST_MS } from '../src/artifacts/constants.ts'
import { silentLogger } from '../src/logger.ts'
import { rejectsWith, until } from './helpers.ts'
import { fetchedCopy } from './fixtures/artifact-stores.ts'

const dirs: string[] = []
const stores: ArtifactStore[] = []
afterEach(async () => {
  for (const s of stores.splice(0)) await s.close()
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true })
})

const SIZE = 1000
/** Room for three artifacts of SIZE bytes and their manifests, not four. */
const ROOM = 3 * (SIZE + 200)

async function openStore (maxBytes = ROOM, maxArtifacts?: number, dir?: string): Promise<{ store: ArtifactStore, removed: Array<[string, RemovedBy]> }> {
  const d = dir ?? await mkdtemp(join(tmpdir(), 'aap-artifact-evict-'))
  if (dir === undefined) dirs.push(d)
  const store = new ArtifactStore(d, maxBytes, silentLogger(), maxArtifacts)
  const removed: Array<[string, RemovedBy]> = []
  store.onRemoved = (id, by) => { removed.push([id, by]) }
  await store.open()
  stores.push(store)
  return { store, removed }
}

const filled = (n: number, byte: number): Uint8Array => new Uint8Array(n).fill(byte)


async function own (store: ArtifactStore, bytes: Uint8Array): Promise<string> {
  return (await store.put((async function * () { yield bytes })())).id
}

async function readAll (store: ArtifactStore, id: string): Promise<number> {
  const m = await store.manifest(id)
  let n = 0
  for await (const c of store.read(id, m!)) n += c.byteLength
  return n
}

describe('an artifact store at its bound', () => {
  it('evicts the least recently used fetched copy for a new write, never a pinned artifact', async () => {
    const { store, removed } = await openStore()
    const a = await fetchedCopy(store, filled(SIZE, 1))
    const b = await fetchedCopy(store, filled(SIZE, 2))
    const p = await own(store, filled(SIZE, 3))
    // a is read again: b is now the least recently used copy
    expect(await readAll(store, a)).toBe(SIZE)
    const q = await own(store, filled(SIZE, 4))
    expect(removed).toEqual([[b, 'evicted']])
    expect(await store.manifest(b)).toBeUndefined()
    for (const id of [a, p, q]) expect(await readAll(store, id)).toBe(SIZE)
    expect(store.stats.evicted).toBe(1)
    expect(store.used).toBeLessThanOrEqual(ROOM)
    // the evicted copy's chunk left the disk with it
    expect(await readdir(join(store.dir, 'chunks'))).toHaveLength(3)
    // one more own artifact: the last copy makes way for it; then only pinned ones are left, and the store is full
    await own(store, filled(SIZE, 5))
    expect(removed.map(r => r[0])).toEqual([b, a])
    const full = await rejectsWith(own(store, filled(SIZE, 6)), 'STORAGE_FULL')
    expect(full.details?.max_bytes).toBe(ROOM)
    expect(await readdir(join(store.dir, 'tmp'))).toEqual([])
    expect(store.count).toBe(3)
  })

  it('keeps the order of use across a restart: a copy read since is not the first to go', async () => {
    const { store } = await openStore()
    const a = await fetchedCopy(store, filled(SIZE, 1))
    const b = await fetchedCopy(store, filled(SIZE, 2))
    const p = await own(store, filled(SIZE, 3))
    // a is read again, more than ARTIFACT_USE_PERSIST_MS after it was stored: its use is written to its manifest
    const usedAt = Date.now() + 2 * ARTIFACT_USE_PERSIST_MS
    vi.useFakeTimers({ toFake: ['Date'] })
    vi.setSystemTime(usedAt)
    const reading = store.read(a, (await store.manifest(a))!)
    vi.useRealTimers()
    for await (const chunk of reading) expect(chunk.byteLength).toBe(SIZE)
    const mtime = async (id: string): Promise<number> => (await stat(join(store.dir, 'manifests', id))).mtimeMs
    await until(async () => Math.abs(await mtime(a) - usedAt) < 1000, 'the use written to the manifest')
    expect(await mtime(b)).toBeLessThan(usedAt - ARTIFACT_USE_PERSIST_MS)
    await store.close()
    stores.splice(stores.indexOf(store), 1)

    // opened again: b is the least recently used copy, so it makes way for a new write
    const again = await openStore(ROOM, undefined, store.dir)
    await own(again.store, filled(SIZE, 4))
    expect(again.removed).toEqual([[b, 'evicted']])
    for (const id of [a, p]) expect(await readAll(again.store, id)).toBe(SIZE)
    expect(again.store.stats.useWriteFailures).toBe(0)
  })

  it('does not evict an artifact being read; it may go once the read ends', async () => {
    const { store, removed } = await openStore(2 * (SIZE + 200))
    const a = await fetchedCopy(store, filled(SIZE, 1))
    const reading = store.read(a, (await store.manifest(a))!)
    expect((await reading.next()).value?.byteLength).toBe(SIZE)
    await own(store, filled(SIZE, 2))
    // full, and the only copy is being read
    await rejectsWith(own(store, filled(SIZE, 3)), 'STORAGE_FULL')
    expect(removed).toEqual([])
    expect((await reading.next()).done).toBe(true)
    await own(store, filled(SIZE, 3))
    expect(removed).toEqual([[a, 'evicted']])
  })

  it('bounds the number of artifacts: a copy makes way, else STORAGE_FULL (too_many_artifacts)', async () => {
    const { store, removed } = await openStore(1024 * 1024, 2)
    const a = await fetchedCopy(store, filled(10, 1))
    await own(store, filled(10, 2))
    await own(store, filled(10, 3))
    expect(removed).toEqual([[a, 'evicted']])
    const e = await rejectsWith(own(store, filled(10, 4)), 'STORAGE_FULL')
    expect(e.details?.reason).toBe('too_many_artifacts')
    expect(store.count).toBe(2)
  })
})

describe('removing an artifact', () => {
  it('takes away its manifest, its pin and the chunks no other artifact names; a reopened store agrees', async () => {
    const { store, removed } = await openStore(64 * ARTIFACT_CHUNK_BYTES)
    const shared = filled(ARTIFACT_CHUNK_BYTES, 9)
    const both = new Uint8Array(ARTIFACT_CHUNK_BYTES + 10)
    both.set(shared)
    const p = await own(store, both)
    const c = await fetchedCopy(store, shared)
    const before = store.used
    const freed = await store.remove(p)
    // the 10-byte chunk and the manifest; the shared chunk stays for the copy
    expect(freed).toBeGreaterThan(10)
    expect(freed).toBeLessThan(10 + 1024)
    expect(store.used).toBe(before - freed)
    expect(removed).toEqual([[p, 'removed']])
    expect(await store.manifest(p)).toBeUndefined()
    expect(await readAll(store, c)).toBe(ARTIFACT_CHUNK_BYTES)
    expect(await readdir(join(store.dir, 'pins'))).toEqual([])
    expect(await readdir(join(store.dir, 'chunks'))).toHaveLength(1)
    await rejectsWith(store.remove(p), 'ARTIFACT_NOT_FOUND')
    // and the last artifact: nothing is left
    await store.remove(c)
    expect(store.used).toBe(0)
    expect(await readdir(join(store.dir, 'chunks'))).toEqual([])
    const again = await own(store, filled(SIZE, 1))
    const dir = store.dir
    await store.close()
    stores.splice(stores.indexOf(store), 1)
    const { store: reopened } = await openStore(64 * ARTIFACT_CHUNK_BYTES, undefined, dir)
    expect(reopened.count).toBe(1)
    expect(reopened.holds(again)).toEqual({ pinned: true })
    expect(reopened.stats.orphanChunksSwept).toBe(0)
  })

  it('keeps a chunk a write in progress counts on, and deletes it when that write is abandoned', async () => {
    const { store } = await openStore(64 * ARTIFACT_CHUNK_BYTES)
    const bytes = filled(SIZE, 5)
    const cid = cidOf(RAW_CODEC, bytes).toString()
    const a = await fetchedCopy(store, bytes)
    // a fetch of another artifact finds the chunk stored and will not stage it
    const w = await store.begin()
    expect(store.hasChunk(cid, w)).toBe(true)
    await store.remove(a)
    expect(await readdir(join(store.dir, 'chunks'))).toHaveLength(1)
    // that write commits: its artifact is whole
    const manifest = encodeManifest({ v: 1, size: SIZE, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: [cid] })
    await store.commit(w, cidOf(JSON_CODEC, manifest).toString(), manifest)
    expect(await readAll(store, cidOf(JSON_CODEC, manifest).toString())).toBe(SIZE)
    await store.remove(cidOf(JSON_CODEC, manifest).toString())
    expect(store.used).toBe(0)
    // a second time, abandoned: the chunk nobody names goes with the write
    const b = await fetchedCopy(store, bytes)
    const w2 = await store.begin()
    expect(store.hasChunk(cid, w2)).toBe(true)
    await store.remove(b)
    expect(await readdir(join(store.dir, 'chunks'))).toHaveLength(1)
    await store.abandon(w2)
    expect(await readdir(join(store.dir, 'chunks'))).toEqual([])
    expect(store.used).toBe(0)
  })

  it('ends a read of it in progress with ARTIFACT_NOT_FOUND (removed)', async () => {
    const { store } = await openStore(64 * ARTIFACT_CHUNK_BYTES)
    const bytes = new Uint8Array(ARTIFACT_CHUNK_BYTES + 1).fill(3)
    const id = await own(store, bytes)
    const reading = store.read(id, (await store.manifest(id))!)
    expect((await reading.next()).value?.byteLength).toBe(ARTIFACT_CHUNK_BYTES)
    await store.remove(id)
    const e = await rejectsWith(reading.next(), 'ARTIFACT_NOT_FOUND')
    expect(e.details?.reason).toBe('removed')
  })
})

describe('the listing of a store', () => {
  it('pages through every artifact in id order, pinned or a copy, with its size', async () => {
    const { store } = await openStore(64 * ARTIFACT_CHUNK_BYTES)
    const ids = new Map<string, boolean>()
    for (let i = 0; i < 5; i++) ids.set(await own(store, filled(10 + i, i)), true)
    for (let i = 5; i < 8; i++) ids.set(await fetchedCopy(store, filled(10 + i, i)), false)
    const seen: string[] = []
    let after: string | undefined
    for (;;) {
      const page = store.list(after, 3)
      if (page.length === 0) break
      for (const a of page) {
        expect(a.pinned).toBe(ids.get(a.artifact))
        expect(Date.parse(a.last_used)).not.toBeNaN()
        seen.push(a.artifact)
      }
      after = page.at(-1)?.artifact
    }
    expect(seen).toEqual([...ids.keys()].sort())
    expect(store.list(undefined, 100).map(a => a.size).sort((x, y) => x - y)).toEqual([10, 11, 12, 13, 14, 15, 16, 17])
  })
})
