/**
 * The artifact store on disk (src/artifacts/store.ts): a write that fails
 * takes away only the chunks it staged. Before, it removed the chunks it had
 * written to the shared `chunks/` folder, including one a complete artifact
 * had found there and counted on meanwhile: that artifact then read as
 * ARTIFACT_CORRUPT (missing_chunk) for good, and was served broken.
 */
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { ARTIFACT_CHUNK_BYTES } from '../src/constants.ts'
import { ArtifactStore } from '../src/artifacts/store.ts'
import { silentLogger } from '../src/logger.ts'

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
    const reopened = new ArtifactStore(store.dir, 64 * ARTIFACT_CHUNK_BYTES, silentLogger())
    await reopened.open()
    expect(store.used).toBe(reopened.used)
    expect(await readAll(store, a.id)).toBe(ARTIFACT_CHUNK_BYTES)
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
    const reopened = new ArtifactStore(store.dir, 64 * ARTIFACT_CHUNK_BYTES, silentLogger())
    await reopened.open()
    expect(await readdir(join(store.dir, 'chunks'))).toHaveLength(2)
    expect(reopened.stats.orphanChunksSwept).toBe(0)
    expect(reopened.stats.unreadableManifests).toBe(1)
  })
})
