/**
 * The pin kept for a manifest that could not be read when the store opened,
 * against a commit of the same artifact meanwhile. Session 44's second
 * review: a failed pinned commit deleted that pin (a pin it had not
 * written), and an unpinned commit left the artifact unpinned in memory
 * while its pin stayed on disk, with the manifest's bytes counted twice.
 */
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { ARTIFACT_CHUNK_BYTES } from '../src/constants.ts'
import { ArtifactStore } from '../src/artifacts/store.ts'
import { JSON_CODEC, RAW_CODEC, cidOf, encodeManifest } from '../src/artifacts/manifest.ts'
import { TempStores } from './fixtures/artifact-stores.ts'

const fault = vi.hoisted(() => ({ unreadable: new Set<string>(), failManifestRename: '' }))
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>()
  const readFile = (async (path: unknown, opts?: unknown) => {
    if ([...fault.unreadable].some(n => String(path).endsWith(`/manifests/${n}`))) throw Object.assign(new Error('EIO: i/o error, read'), { code: 'EIO' })
    return await fs.readFile(path as string, opts as undefined)
  }) as typeof fs.readFile
  const rename: typeof fs.rename = async (from, to) => {
    if (fault.failManifestRename !== '' && String(to).endsWith(`/manifests/${fault.failManifestRename}`)) {
      fault.failManifestRename = ''
      throw Object.assign(new Error('EIO: i/o error, rename'), { code: 'EIO' })
    }
    return await fs.rename(from, to)
  }
  return { ...fs, readFile, rename, default: { ...fs, readFile, rename } }
})

const stores = new TempStores()
afterEach(async () => {
  fault.unreadable.clear()
  fault.failManifestRename = ''
  await stores.cleanup()
})

const X = new Uint8Array(1000).fill(7)
const cidX = cidOf(RAW_CODEC, X).toString()
const manifest = encodeManifest({ v: 1, size: X.byteLength, chunk_bytes: ARTIFACT_CHUNK_BYTES, chunks: [cidX] })
const id = cidOf(JSON_CODEC, manifest).toString()

async function write (store: ArtifactStore, pin: boolean): Promise<void> {
  const w = await store.begin()
  if (!store.hasChunk(cidX, w)) await store.stage(w, cidX, X)
  await store.commit(w, id, manifest, pin)
}

describe('a pin kept for a manifest unreadable at open', () => {
  it('a failed pinned commit of the same id leaves the kept pin: the artifact is still pinned', async () => {
    let store = await stores.open()
    await write(store, true)
    fault.unreadable.add(id)
    store = await stores.reopen(store)
    expect(store.holds(id)).toBeUndefined()
    expect(await readdir(join(store.dir, 'pins'))).toEqual([id])
    // the owner uploads the same bytes again; the manifest's write fails
    fault.failManifestRename = id
    await expect(write(store, true)).rejects.toThrow()
    expect(await readdir(join(store.dir, 'pins'))).toEqual([id])
    expect(await readdir(join(store.dir, 'manifests'))).toEqual([id])
    fault.unreadable.clear()
    store = await stores.reopen(store)
    expect(store.holds(id)).toEqual({ pinned: true })
  })

  it('an unpinned commit of the same id keeps it pinned, and counts its manifest once', async () => {
    let store = await stores.open()
    await write(store, true)
    fault.unreadable.add(id)
    store = await stores.reopen(store)
    fault.unreadable.clear()
    const before = store.used
    await write(store, false) // a fetched copy of the same artifact
    expect(store.holds(id)).toEqual({ pinned: true })
    // the manifest file was overwritten with the same bytes: counted once (at open)
    expect(store.used).toBe(before)
    expect(await readdir(join(store.dir, 'pins'))).toEqual([id])
    store = await stores.reopen(store)
    expect(store.holds(id)).toEqual({ pinned: true })
    expect(store.used).toBe(before)
  })
})
