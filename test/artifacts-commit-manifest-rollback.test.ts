/**
 * A commit whose last folder sync fails (manifests/ after the manifest was renamed into it) deleted the chunks it
 * had moved but left the manifest: the next open counted the artifact as whole, a read failed `missing_chunk`,
 * peers were answered ARTIFACT_NOT_FOUND chunk by chunk, and a fetch found it here and never fetched it again.
 * Now the manifest goes before the chunks; and when it cannot go either, the chunks stay with it, so the
 * artifact is whole (here now, and after a restart). The faults are made through node:fs/promises; the bytes
 * land on a real disk. Found by session 49's artifact review.
 */
import { afterEach, describe, expect, it, vi } from 'vitest'
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { TempStores, diskBytes, readAll } from './fixtures/artifact-stores.ts'
import { rejectsWith } from './helpers.ts'

const fault = vi.hoisted(() => ({ syncManifests: false, rmManifests: false }))

vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>()
  const eio = (what: string): Error => Object.assign(new Error(`EIO: i/o error, ${what}`), { code: 'EIO' })
  const open = (async (path: Parameters<typeof fs.open>[0], flags?: Parameters<typeof fs.open>[1]) => {
    const fh = await fs.open(path, flags)
    const failing = String(path).endsWith('/manifests')
    return new Proxy(fh, {
      get (target, prop) {
        if (prop === 'sync' && failing && fault.syncManifests) return async () => { throw eio('fsync') }
        const v: unknown = Reflect.get(target, prop, target)
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
      }
    })
  }) as typeof fs.open
  const rm = (async (path: Parameters<typeof fs.rm>[0], opts?: Parameters<typeof fs.rm>[1]) => {
    if (fault.rmManifests && String(path).includes('/manifests/')) throw eio('unlink')
    return await fs.rm(path, opts)
  }) as typeof fs.rm
  return { ...fs, open, rm, default: { ...fs, open, rm } }
})

const MIB = 1024 * 1024
async function * bytes (n: number, seed: number): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < n; i++) yield new Uint8Array(MIB).fill((seed + i) & 0xff)
}

const stores = new TempStores()
afterEach(async () => {
  fault.syncManifests = false
  fault.rmManifests = false
  await stores.cleanup()
})

describe('a commit whose manifests/ sync fails', () => {
  it('takes its manifest back with its chunks: nothing counts as whole, now or after a restart', async () => {
    const store = await stores.open()
    fault.syncManifests = true
    await rejectsWith(store.put(bytes(2, 3)), 'STORAGE_FULL')
    fault.syncManifests = false
    expect(await readdir(join(store.dir, 'manifests'))).toEqual([])
    expect(await readdir(join(store.dir, 'chunks'))).toEqual([])
    expect(store.list(undefined, 10)).toEqual([])
    expect(store.used).toBe(await diskBytes(store.dir))
    const again = await stores.reopen(store)
    expect(again.list(undefined, 10)).toEqual([])
    // the same bytes stored again are whole
    const { id } = await again.put(bytes(2, 3))
    expect(await readAll(again, id)).toBe(2 * MIB)
  })

  it('keeps the chunks of a manifest that cannot be taken back: the artifact is whole, now and after a restart', async () => {
    const store = await stores.open()
    fault.syncManifests = true
    fault.rmManifests = true
    await rejectsWith(store.put(bytes(2, 7)), 'STORAGE_FULL')
    fault.syncManifests = false
    fault.rmManifests = false
    const [left] = await readdir(join(store.dir, 'manifests'))
    expect(left).toBeDefined()
    expect(await readdir(join(store.dir, 'chunks'))).toHaveLength(2)
    expect(store.list(undefined, 10).map(a => a.artifact)).toEqual([left])
    expect(await readAll(store, left!)).toBe(2 * MIB)
    expect(store.used).toBe(await diskBytes(store.dir))
    expect(store.stats.deleteFailures).toBe(1)
    const again = await stores.reopen(store)
    expect(again.list(undefined, 10).map(a => a.artifact)).toEqual([left])
    expect(await readAll(again, left!)).toBe(2 * MIB)
  })
})
