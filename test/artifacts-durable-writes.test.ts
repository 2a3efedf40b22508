/**
 * Artifact files outlive a power loss as the run events that name them do
 * (the run store syncs its log, src/storage/durability.ts). The store wrote
 * chunks, manifests and pins and renamed them into place without a sync:
 * after a power loss a rename could name an empty file, which the store took
 * for a chunk it held (served, and never fetched again) or an unreadable
 * manifest (no eviction while the store is open). Now every file is synced
 * before its rename, and chunks/ before a manifest names them, then
 * manifests/ (and pins/) before the commit ends. What is synced is watched
 * through node:fs/promises; the bytes land on a real disk. Found by session
 * 45's artifact review.
 */
import { afterEach, describe, expect, it, vi } from 'vitest'
import { TempStores, readAll } from './fixtures/artifact-stores.ts'

const seen = vi.hoisted(() => ({ log: [] as string[] }))
vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>()
  const tail = (p: unknown): string => String(p).split('/').slice(-2).join('/')
  const writeFile = (async (path: Parameters<typeof fs.writeFile>[0], data: Parameters<typeof fs.writeFile>[1], opts?: Parameters<typeof fs.writeFile>[2]) => {
    seen.log.push(`write ${(opts as { flush?: boolean } | undefined)?.flush === true ? 'flushed' : 'unsynced'} ${tail(path).split('/')[0]}`)
    return await fs.writeFile(path, data, opts)
  }) as typeof fs.writeFile
  const rename = (async (from: Parameters<typeof fs.rename>[0], to: Parameters<typeof fs.rename>[1]) => {
    seen.log.push(`rename into ${tail(to).split('/')[0]}`)
    return await fs.rename(from, to)
  }) as typeof fs.rename
  const open = (async (path: Parameters<typeof fs.open>[0], flags?: Parameters<typeof fs.open>[1]) => {
    const fh = await fs.open(path, flags)
    const name = String(path).split('/').at(-1)
    return new Proxy(fh, {
      get (target, prop) {
        if (prop === 'sync') return async () => { seen.log.push(`sync ${name}`); await target.sync() }
        const v: unknown = Reflect.get(target, prop, target)
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
      }
    })
  }) as typeof fs.open
  return { ...fs, writeFile, rename, open, default: { ...fs, writeFile, rename, open } }
})

const stores = new TempStores()
afterEach(async () => {
  seen.log.length = 0
  await stores.cleanup()
})

describe('what the artifact store writes', () => {
  it('is synced before it is renamed into place, and the folders before the commit ends', async () => {
    const store = await stores.open()
    seen.log.length = 0
    const { id } = await store.put((async function * () { yield new Uint8Array(100).fill(1); yield new Uint8Array(200).fill(2) })())
    expect(seen.log.filter(l => l.startsWith('write')).every(l => l.startsWith('write flushed'))).toBe(true)
    // the chunk moves in, chunks/ is synced, then the pin and the manifest are written and renamed, then their folders synced
    const at = (l: string): number => seen.log.indexOf(l)
    expect(at('rename into chunks')).toBeGreaterThanOrEqual(0)
    expect(at('sync chunks')).toBeGreaterThan(at('rename into chunks'))
    expect(at('rename into manifests')).toBeGreaterThan(at('sync chunks'))
    expect(at('sync manifests')).toBeGreaterThan(at('rename into manifests'))
    expect(at('sync pins')).toBeGreaterThan(at('rename into pins'))
    expect(await readAll(store, id)).toBe(300)
  })
})
