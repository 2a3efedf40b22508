/**
 * The artifact store on disk (src/artifacts/store.ts): a write that fails
 * takes away only the chunks it staged. Before, it removed the chunks it had
 * written to the shared `chunks/` folder, including one a complete artifact
 * had found there and counted on meanwhile: that artifact then read as
 * ARTIFACT_CORRUPT (missing_chunk) for good, and was served broken.
 */
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import { base58btc } from 'multiformats/bases/base58'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { ARTIFACT_CHUNK_BYTES } from '../src/constants.ts'
import { ArtifactStore } from '../src/artifacts/store.ts'
import { JSON_CODEC, RAW_CODEC, cidOf, encodeManifest } from '../src/artifacts/manifest.ts'
import { silentLogger } from '../src/logger.ts'
import { rejectsWith } from './helpers.ts'

const dirs: string[] = []
afterEach(async () => { for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true }) })

async function openStore (): Promise<ArtifactStore> {
  const dir = await mkdtemp(join(tmpdir(), 'aap-artifact-store-'))
  dirs.push(dir)
  const store = new ArtifactStore(dir, 64 * ARTIFACT_CHUNK_BYTES, silentLogger())
  await store.open()
  return store
}

async function readAll (store: ArtifactStore, id: string): Promise<number> {
  const m = await store.manifest(id)
  let n = 0
  for await (const c of store.read(id, m!)) n += c.byteLength
  return n
}

describe('artifact store writes', () => {
  it('a failed upload leaves alone a chunk a complete artifact shares', async () => {
    const store = await openStore()
    const shared = new Uint8Array(ARTIFACT_CHUNK_BYTES).fill(7)
    const gate = Promise.withResolvers<void>()
    const staged = Promise.withResolvers<void>()
    // an upload that sends the shared chunk, then fails (its client went away)
    const failing = store.put((async function * () {
      yield shared
      yield new Uint8Array(10)
      staged.resolve()
      await gate.promise
      throw new Error('the client went away')
    })())
    await staged.promise
    // meanwhile a whole artifact made of that same chunk
    const whole = await store.put((async function * () { yield shared })())
    gate.resolve()
    await expect(failing).rejects.toThrow('went away')
    // the complete artifact still reads whole
    expect(await readAll(store, whole.id)).toBe(ARTIFACT_CHUNK_BYTES)
    // and the store counts what it holds: one chunk and one manifest, nothing staged left
    expect(await readdir(join(store.dir, 'chunks'))).toHaveLength(1)
    expect(await readdir(join(store.dir, 'tmp'))).toEqual([])
    await store.close()
    const reopened = new ArtifactStore(store.dir, 64 * ARTIFACT_CHUNK_BYTES, silentLogger())
    await reopened.open()
    expect(store.used).toBe(reopened.used)
  })

  it('two writes of the same chunk at once store it once and count it once', async () => {
    const store = await openStore()
    const bytes = new Uint8Array(ARTIFACT_CHUNK_BYTES).fill(3)
    const [a, b] = await Promise.all([store.put((async function * () { yield bytes })()), store.put((async function * () { yield bytes })())])
    expect(a.id).toBe(b.id)
    expect(await readdir(join(store.dir, 'chunks'))).toHaveLength(1)
    await store.close()
    const reopened = new ArtifactStore(store.dir, 64 * ARTIFACT_CHUNK_BYTES, silentLogger())
    await reopened.open()
    expect(store.used).toBe(reopened.used)
    expect(await readAll(store, a.id)).toBe(ARTIFACT_CHUNK_BYTES)
  })

  it('one write that stages the same chunk twice at once (an artifact that repeats it) writes it once and counts it once', async () => {
    const store = await openStore()
    const bytes = new Uint8Array(ARTIFACT_CHUNK_BYTES).fill(5)
    const cid = cidOf(RAW_CODEC, bytes).toString()
    const w = await store.begin()
    const before = store.used
    await Promise.all([store.stage(w, cid, bytes), store.stage(w, cid, bytes), store.stage(w, cid, bytes)])
    expect(store.used - before).toBe(ARTIFACT_CHUNK_BYTES)
    expect([...w.staged.keys()]).toEqual([cid])
    expect(await readdir(w.dir)).toEqual([cid])
    expect(w.writing.size).toBe(0)
    const manifest = encodeManifest({ v: 1, size: 2 * ARTIFACT_CHUNK_BYTES, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: [cid, cid] })
    const id = cidOf(JSON_CODEC, manifest).toString()
    await store.commit(w, id, manifest)
    expect(store.used - before).toBe(ARTIFACT_CHUNK_BYTES + manifest.byteLength)
    expect(await readAll(store, id)).toBe(2 * ARTIFACT_CHUNK_BYTES)
  })

  it('chunks a write moved in but no manifest names (it died before its manifest) are swept when the store opens; shared ones stay', async () => {
    const store = await openStore()
    const shared = new Uint8Array(ARTIFACT_CHUNK_BYTES).fill(5)
    const kept = await store.put((async function * () { yield shared })())
    const usedBefore = store.used
    const other = await store.put((async function * () { yield shared; yield new Uint8Array(ARTIFACT_CHUNK_BYTES).fill(6); yield new Uint8Array(9) })())
    // what a kill -9 between moving the chunks and writing the manifest leaves on disk
    await rm(join(store.dir, 'manifests', other.id))
    expect(await readdir(join(store.dir, 'chunks'))).toHaveLength(3)
    await store.close()
    const reopened = new ArtifactStore(store.dir, 64 * ARTIFACT_CHUNK_BYTES, silentLogger())
    await reopened.open()
    // before, the two orphans stayed on disk and counted against the store's bound for good
    expect(await readdir(join(store.dir, 'chunks'))).toHaveLength(1)
    expect(reopened.used).toBe(usedBefore)
    expect(reopened.stats.orphanChunksSwept).toBe(2)
    expect(await readAll(reopened, kept.id)).toBe(ARTIFACT_CHUNK_BYTES)
    expect(await reopened.manifest(other.id)).toBeUndefined()
  })

  it('sweeps nothing when a manifest cannot be read (its chunks are not known)', async () => {
    const store = await openStore()
    const a = await store.put((async function * () { yield new Uint8Array(100).fill(1) })())
    await store.put((async function * () { yield new Uint8Array(100).fill(2) })())
    await writeFile(join(store.dir, 'manifests', a.id), 'damaged')
    await store.close()
    const reopened = new ArtifactStore(store.dir, 64 * ARTIFACT_CHUNK_BYTES, silentLogger())
    await reopened.open()
    expect(await readdir(join(store.dir, 'chunks'))).toHaveLength(2)
    expect(reopened.stats.orphanChunksSwept).toBe(0)
    expect(reopened.stats.unreadableManifests).toBe(1)
  })

  it('is one store per folder in a process: a second open is refused until the first closes, and a write left in progress then fails', async () => {
    const store = await openStore()
    const second = new ArtifactStore(store.dir, 64 * ARTIFACT_CHUNK_BYTES, silentLogger())
    await expect(second.open()).rejects.toThrow('open already')
    const gate = Promise.withResolvers<void>()
    const staged = Promise.withResolvers<void>()
    const writing = store.put((async function * () {
      yield new Uint8Array(ARTIFACT_CHUNK_BYTES).fill(4)
      staged.resolve()
      await gate.promise
      yield new Uint8Array(3)
    })())
    await staged.promise
    await store.close()
    await second.open()
    gate.resolve()
    await expect(writing).rejects.toMatchObject({ code: 'INTERNAL', details: { reason: 'store_closed' } })
    expect(await readdir(join(store.dir, 'manifests'))).toEqual([])
    await second.close()
  })

  it('keeps, reads and sweeps chunks by their canonical id whatever multibase a manifest spells them in; leaves other files alone', async () => {
    const store = await openStore()
    const bytes = new Uint8Array(100).fill(8)
    const chunk = cidOf(RAW_CODEC, bytes)
    // a peer's manifest may name its chunks in base58btc
    const manifest = encodeManifest({ v: 1, size: 100, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: [chunk.toString(base58btc)] })
    const id = cidOf(JSON_CODEC, manifest)
    const w = await store.begin()
    await store.stage(w, chunk.toString(base58btc), bytes)
    await store.commit(w, id.toString(base58btc), manifest)
    // before, the chunk was kept under its base58 name and read under its base32 one: ARTIFACT_CORRUPT (missing_chunk)
    expect(await readAll(store, id.toString())).toBe(100)
    await mkdir(join(store.dir, 'chunks', 'lost+found'))
    await writeFile(join(store.dir, 'chunks', 'notes.txt'), 'not a chunk')
    await writeFile(join(store.dir, 'manifests', '.DS_Store'), 'not a manifest')
    await store.close()
    const reopened = new ArtifactStore(store.dir, 64 * ARTIFACT_CHUNK_BYTES, silentLogger())
    await reopened.open()
    expect(reopened.stats).toEqual({ orphanChunksSwept: 0, unreadableManifests: 0, removed: 0, evicted: 0, deleteFailures: 0, useWriteFailures: 0 })
    expect(await readAll(reopened, id.toString())).toBe(100)
    expect((await readdir(join(store.dir, 'chunks'))).sort()).toEqual([chunk.toString(), 'lost+found', 'notes.txt'].sort())
    await reopened.close()
  })

  it('refuses to commit a manifest naming a chunk neither stored nor staged by the write, and commits nothing', async () => {
    // no path of the node does this (put and fetch stage every chunk they name); a caller that did made a manifest
    // on disk say the artifact is whole here when it is not, and every read of it fail as corrupt
    const store = await openStore()
    const absent = cidOf(RAW_CODEC, new Uint8Array(5).fill(9))
    const bytes = encodeManifest({ v: 1, size: 5, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: [absent.toString()] })
    const id = cidOf(JSON_CODEC, bytes).toString()
    const w = await store.begin()
    const err = await rejectsWith(store.commit(w, id, bytes), 'INTERNAL')
    expect(err.details).toMatchObject({ reason: 'chunk_not_held', index: 0 })
    expect(await store.manifest(id)).toBeUndefined()
    expect(store.holds(id)).toBeUndefined()
    await store.close()
  })
})
