/**
 * An eviction under way does not take a copy a read opened meanwhile
 * (src/artifacts/store.ts `removeOnTurn`). The victim is picked with no
 * readers, then its manifest is read from disk; a download that opened the
 * copy in that window was answered 200 with its length and then cut short
 * (ARTIFACT_NOT_FOUND, `reason: removed`) when the eviction deleted its
 * chunks. Now the eviction looks at the readers again after that read and
 * takes the next copy (or none). Found by session 59's artifact review.
 */
import { afterEach, describe, expect, it } from 'vitest'
import type { Catalog } from '../src/artifacts/catalog.ts'
import type { Manifest } from '../src/artifacts/manifest.ts'
import { TempStores, fetchedCopy, readAll } from './fixtures/artifact-stores.ts'

const stores = new TempStores()
afterEach(async () => { await stores.cleanup() })

/** Room for one copy of SIZE bytes and its manifest, not for it and BIG more bytes. */
const SIZE = 1000
const BIG = 2000
const ROOM = 2500

const filled = (n: number, byte: number): Uint8Array => new Uint8Array(n).fill(byte)


async function bytesOf (chunks: AsyncGenerator<Uint8Array>): Promise<number> {
  let n = 0
  for await (const c of chunks) n += c.byteLength
  return n
}

describe('an eviction under way and a read opened meanwhile', () => {
  it('keeps the copy being read whole, and evicts it once the read is done', async () => {
    const store = await stores.open(ROOM)
    const x = await fetchedCopy(store, filled(SIZE, 1))
    const m = await store.manifest(x) as Manifest
    // a download opens x right after the eviction picked it (with no readers then), while it reads x's manifest
    const catalog = (store as unknown as { catalog: Catalog }).catalog
    const evictable = catalog.evictable.bind(catalog)
    let reader: AsyncGenerator<Uint8Array> | undefined
    catalog.evictable = () => {
      const id = evictable()
      if (id === x && reader === undefined) queueMicrotask(() => { reader = store.read(x, m) })
      return id
    }
    const write = await fetchedCopy(store, filled(BIG, 2)).then(() => 'stored', (e: { code?: string }) => e.code)
    expect(reader).toBeDefined()
    // the read gets every byte (before: ARTIFACT_NOT_FOUND, reason removed, after the first chunk's place)
    expect(await bytesOf(reader as AsyncGenerator<Uint8Array>)).toBe(SIZE)
    // the only copy was being read: nothing could be evicted for the new write
    expect(write).toBe('STORAGE_FULL')
    expect(store.holds(x)).toEqual({ pinned: false })
    // the read is done: the copy may go now
    const y = await fetchedCopy(store, filled(BIG, 3))
    expect(store.holds(x)).toBeUndefined()
    expect(await readAll(store, y)).toBe(BIG)
  })
})
