/**
 * A manifest that cannot be read when the artifact store opens (an I/O
 * error, injected here): its chunks are not known, so no chunk is deleted
 * while the store is open, and its pin stays, so the node's own upload is
 * still pinned once the manifest reads again. Found by session 44's review:
 * the open dropped that pin (the upload came back as an evictable copy), and
 * remove() deleted a chunk the unreadable manifest named (ARTIFACT_CORRUPT
 * once it read again).
 */
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { ARTIFACT_CHUNK_BYTES } from '../src/constants.ts'
import { ArtifactStore } from '../src/artifacts/store.ts'
import { TempStores, readAll } from './fixtures/artifact-stores.ts'

const fault = vi.hoisted(() => ({ unreadable: new Set<string>() }))
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>()
  const readFile = (async (path: Parameters<typeof fs.readFile>[0], opts?: Parameters<typeof fs.readFile>[1]) => {
    if ([...fault.unreadable].some(n => String(path).endsWith(`/manifests/${n}`))) throw Object.assign(new Error('EIO: i/o error, read'), { code: 'EIO' })
    return await fs.readFile(path, opts ?? null)
  }) as typeof fs.readFile
  return { ...fs, readFile, default: { ...fs, readFile } }
})

const stores = new TempStores()
afterEach(async () => {
  fault.unreadable.clear()
  await stores.cleanup()
})

async function own (s: ArtifactStore, parts: Uint8Array[]): Promise<string> {
  return (await s.put((async function * () { for (const p of parts) yield p })())).id
}
describe('a manifest unreadable when the store opens', () => {
  it('keeps its pin: the node\'s own upload is still pinned once it reads again', async () => {
    let store = await stores.open()
    const u = await own(store, [new Uint8Array(100).fill(1)])
    expect(store.holds(u)).toEqual({ pinned: true })
    fault.unreadable.add(u)
    store = await stores.reopen(store)
    expect(store.stats.unreadableManifests).toBe(1)
    expect(await readdir(join(store.dir, 'pins'))).toEqual([u])
    fault.unreadable.clear()
    store = await stores.reopen(store)
    expect(store.holds(u)).toEqual({ pinned: true })
  })

  it('keeps every chunk while it cannot be read: a removal takes only the manifest, and the artifact reads whole again', async () => {
    let store = await stores.open()
    const shared = new Uint8Array(ARTIFACT_CHUNK_BYTES).fill(9)
    const u = await own(store, [shared, new Uint8Array(10).fill(2)])
    const a = await own(store, [shared])
    fault.unreadable.add(u)
    store = await stores.reopen(store)
    expect(store.stats.unreadableManifests).toBe(1)
    const chunksBefore = (await readdir(join(store.dir, 'chunks'))).length
    const used = store.used
    const freed = await store.remove(a)
    // the shared chunk stays (u, unreadable now, names it), and stays counted
    expect((await readdir(join(store.dir, 'chunks'))).length).toBe(chunksBefore)
    expect(store.used).toBe(used - freed)
    expect(freed).toBeLessThan(1024)
    fault.unreadable.clear()
    store = await stores.reopen(store)
    expect(store.holds(u)).toEqual({ pinned: true })
    expect(await readAll(store, u)).toBe(ARTIFACT_CHUNK_BYTES + 10)
  })
})
