/**
 * An upload of bytes the store already held (a run output, or a copy fetched from a peer) pinned them by writing
 * pins/<id>, but did not sync pins/ before the upload was answered: after a power loss the operator's upload
 * could be a copy again, and evicted. Now pins/ is synced first, and a pin whose sync fails goes again (the
 * upload fails STORAGE_FULL and the artifact is kept as before). What is synced is watched through
 * node:fs/promises; the bytes land on a real disk. Found by session 49's artifact review.
 */
import { afterEach, describe, expect, it, vi } from 'vitest'
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { TempStores } from './fixtures/artifact-stores.ts'
import { rejectsWith } from './helpers.ts'

const seen = vi.hoisted(() => ({ log: [] as string[], failPinSync: false }))
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>()
  const rename = (async (from: Parameters<typeof fs.rename>[0], to: Parameters<typeof fs.rename>[1]) => {
    seen.log.push(`rename into ${String(to).split('/').at(-2) ?? ''}`)
    return await fs.rename(from, to)
  }) as typeof fs.rename
  const open = (async (path: Parameters<typeof fs.open>[0], flags?: Parameters<typeof fs.open>[1]) => {
    const fh = await fs.open(path, flags)
    const name = String(path).split('/').at(-1) ?? ''
    return new Proxy(fh, {
      get (target, prop) {
        if (prop === 'sync') {
          return async () => {
            seen.log.push(`sync ${name}`)
            if (seen.failPinSync && name === 'pins') throw Object.assign(new Error('EIO: i/o error, fsync'), { code: 'EIO' })
            await target.sync()
          }
        }
        const v: unknown = Reflect.get(target, prop, target)
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
      }
    })
  }) as typeof fs.open
  return { ...fs, rename, open, default: { ...fs, rename, open } }
})

async function * gen (): AsyncGenerator<Uint8Array> {
  yield new Uint8Array(300).fill(5)
}

const stores = new TempStores()
afterEach(async () => {
  seen.log.length = 0
  seen.failPinSync = false
  await stores.cleanup()
})

describe('an upload of bytes the store holds already', () => {
  it('syncs the pin it writes before the upload ends', async () => {
    const store = await stores.open()
    const { id } = await store.put(gen(), 'run-output')
    seen.log.length = 0
    await store.put(gen(), true)
    expect(seen.log).toContain('rename into pins')
    expect(seen.log.lastIndexOf('sync pins')).toBeGreaterThan(seen.log.lastIndexOf('rename into pins'))
    expect(store.holds(id)).toEqual({ pinned: true })
    expect(store.list(undefined, 10)).toHaveLength(1)
  })

  it('fails STORAGE_FULL when that sync fails, and leaves the artifact kept as it was', async () => {
    const store = await stores.open()
    const { id } = await store.put(gen(), 'run-output')
    seen.failPinSync = true
    await rejectsWith(store.put(gen(), true), 'STORAGE_FULL')
    seen.failPinSync = false
    // still a run output (outputs/), not pinned for good by a pin that may not outlive a power loss
    expect(await readdir(join(store.dir, 'pins'))).toEqual([])
    expect(await readdir(join(store.dir, 'outputs'))).toEqual([id])
    // the upload tried again pins it
    await store.put(gen(), true)
    expect(await readdir(join(store.dir, 'pins'))).toEqual([id])
    const again = await stores.reopen(store)
    expect(again.holds(id)).toEqual({ pinned: true })
  })
})
