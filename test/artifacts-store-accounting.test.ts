/**
 * The artifact store's count of its bytes (`store.used`) against the bytes
 * of the files in chunks/, manifests/ and tmp/, after mixes of uploads,
 * fetch-style commits, abandoned writes, removals and evictions, and after
 * commits that fail (a chunk's move, the pin's write, the manifest's write).
 * A failed pinned commit leaves no pin behind (session 44's review: such a
 * pin pinned a later fetched copy of the same artifact).
 */
import { mkdir, readdir, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { ARTIFACT_CHUNK_BYTES } from '../src/constants.ts'
import { ArtifactStore } from '../src/artifacts/store.ts'
import { JSON_CODEC, RAW_CODEC, cidOf, encodeManifest } from '../src/artifacts/manifest.ts'
import { rejectsWith } from './helpers.ts'
import { TempStores, diskBytes } from './fixtures/artifact-stores.ts'

const fault = vi.hoisted(() => ({ renameIntoChunks: 0, renames: 0 }))
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>()
  const rename: typeof fs.rename = async (from, to) => {
    if (fault.renameIntoChunks > 0 && String(to).includes('/chunks/') && ++fault.renames === fault.renameIntoChunks) {
      fault.renameIntoChunks = 0
      throw Object.assign(new Error('EIO: i/o error, rename'), { code: 'EIO' })
    }
    return fs.rename(from, to)
  }
  return { ...fs, rename, default: { ...fs, rename } }
})

const stores = new TempStores()
afterEach(async () => { await stores.cleanup() })

function artifact (parts: Uint8Array[]): { id: string, manifest: Uint8Array, chunks: Array<[string, Uint8Array]> } {
  const chunks = parts.map((p): [string, Uint8Array] => [cidOf(RAW_CODEC, p).toString(), p])
  const manifest = encodeManifest({ v: 1, size: parts.reduce((n, p) => n + p.byteLength, 0), chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: chunks.map(c => c[0]) })
  return { id: cidOf(JSON_CODEC, manifest).toString(), manifest, chunks }
}

async function stageAll (store: ArtifactStore, a: ReturnType<typeof artifact>): Promise<Awaited<ReturnType<ArtifactStore['begin']>>> {
  const w = await store.begin()
  for (const [cid, bytes] of a.chunks) if (!store.hasChunk(cid, w)) await store.stage(w, cid, bytes)
  return w
}

const full = (b: number): Uint8Array => new Uint8Array(ARTIFACT_CHUNK_BYTES).fill(b)
const small = (n: number, b: number): Uint8Array => new Uint8Array(n).fill(b)

describe('store.used equals the bytes on disk', () => {
  it('after put / copy / duplicate stage / abandon / remove / evict', async () => {
    const store = await stores.open(4 * ARTIFACT_CHUNK_BYTES + 4096)
    const check = async (): Promise<void> => { expect(store.used).toBe(await diskBytes(store.dir)) }
    const shared = full(1)
    const a = artifact([shared, small(10, 2)])
    const b = artifact([shared, small(20, 3)])
    const c = artifact([full(4), small(30, 5)])
    // two writes stage the same chunk at once; both commit
    const wa = await stageAll(store, a)
    const wb = await stageAll(store, b)
    await check()
    await Promise.all([store.commit(wa, a.id, a.manifest), store.commit(wb, b.id, b.manifest)])
    await check()
    // a write that borrows and is abandoned
    const wx = await stageAll(store, artifact([shared, small(40, 6)]))
    await store.abandon(wx)
    await check()
    // pinned upload that forces evictions
    await store.put((async function * () { yield full(7); yield full(8); yield full(9) })())
    await check()
    const wc = await stageAll(store, c)
    await store.commit(wc, c.id, c.manifest)
    expect(store.stats.evicted).toBe(2)
    await check()
    for (const id of [a.id, b.id, c.id]) if (store.holds(id) !== undefined) await store.remove(id)
    await check()
  })

  it('after a commit whose second chunk move fails', async () => {
    const store = await stores.open(64 * ARTIFACT_CHUNK_BYTES)
    const a = artifact([full(1), full(2), small(5, 3)])
    const w = await stageAll(store, a)
    fault.renames = 0
    fault.renameIntoChunks = 2
    await rejectsWith(store.commit(w, a.id, a.manifest), 'STORAGE_FULL')
    expect(store.used).toBe(await diskBytes(store.dir))
    expect(store.used).toBe(0)
  })

  it('after a commit whose pin write fails, and one whose manifest write fails', async () => {
    const store = await stores.open(64 * ARTIFACT_CHUNK_BYTES)
    const a = artifact([full(1), small(5, 3)])
    // a directory where the pin goes: the pin's rename fails
    await mkdir(join(store.dir, 'pins', a.id, 'x'), { recursive: true })
    const w = await stageAll(store, a)
    await expect(store.commit(w, a.id, a.manifest, true)).rejects.toThrow()
    expect(store.used).toBe(await diskBytes(store.dir))
    expect(store.holds(a.id)).toBeUndefined()
    await rm(join(store.dir, 'pins', a.id), { recursive: true })
    // a directory where the manifest goes
    const b = artifact([full(2), small(6, 4)])
    await mkdir(join(store.dir, 'manifests', b.id, 'x'), { recursive: true })
    const w2 = await stageAll(store, b)
    await expect(store.commit(w2, b.id, b.manifest, true)).rejects.toThrow()
    expect(store.used).toBe(await diskBytes(store.dir))
    // the pin it wrote first went with the failure
    expect(await readdir(join(store.dir, 'pins'))).toEqual([])
  })

  it('a failed pinned commit does not pin a later fetched copy of the same artifact', async () => {
    const store = await stores.open(64 * ARTIFACT_CHUNK_BYTES)
    const b = artifact([full(2), small(6, 4)])
    await mkdir(join(store.dir, 'manifests', b.id, 'x'), { recursive: true })
    const w = await stageAll(store, b)
    await expect(store.commit(w, b.id, b.manifest, true)).rejects.toThrow()
    await rm(join(store.dir, 'manifests', b.id), { recursive: true })
    // the same artifact now arrives as a fetched copy (unpinned)
    const w2 = await stageAll(store, b)
    await store.commit(w2, b.id, b.manifest)
    expect(store.holds(b.id)).toEqual({ pinned: false })
    const again = await stores.reopen(store)
    expect(again.holds(b.id)).toEqual({ pinned: false })
  })
})
