/**
 * The peer store's records in memory while the disk refuses them (src/wire/peer-store-memory.ts): what memory
 * took is what get, has and query answer, a refused delete hides the disk's record, a write that reaches the disk
 * again takes the record out of memory, memory is bounded, and no other key or failure is touched.
 */
import { describe, expect, it } from 'vitest'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { MemoryDatastore } from 'datastore-core'
import { LevelDatastore } from 'datastore-level'
import { Key, type Pair, type Query } from 'interface-datastore'
import { silentLogger } from '../src/logger.ts'
import { guardWrites } from '../src/storage/write-guard.ts'
import { keepPeerRecordsInMemory } from '../src/wire/peer-store-memory.ts'
import { FaultyDatastore } from './fixtures/faulty-datastore.ts'

const bytes = (s: string): Uint8Array => new TextEncoder().encode(s)
const text = (b: Uint8Array): string => new TextDecoder().decode(b)

async function all (it: AsyncIterable<Pair> | Iterable<Pair>): Promise<string[]> {
  const out: string[] = []
  for await (const p of it) out.push(`${p.key.toString()}=${text(p.value)}`)
  return out
}

describe('peer-store records in memory', () => {
  it('answers from memory what the disk refused, merges it into queries, and lets it go once the disk takes it', async () => {
    const faulty = new FaultyDatastore(new MemoryDatastore())
    const { store, stats } = keepPeerRecordsInMemory(guardWrites(faulty.store), silentLogger(), 3)
    const a = new Key('/peers/a')
    const b = new Key('/peers/b')
    const c = new Key('/peers/c')
    await store.put(a, bytes('a1'))
    await store.put(b, bytes('b1'))

    faulty.failing = true
    await store.put(a, bytes('a2'))
    await store.put(c, bytes('c2'))
    await store.delete(b)
    expect(stats).toEqual({ held: 3, kept: 3, overflow: 0, afterClose: 0 })
    expect(text(await store.get(a))).toBe('a2')
    expect(await store.has(b)).toBe(false)
    await expect(store.get(b)).rejects.toMatchObject({ name: 'NotFoundError' })
    expect(await store.has(c)).toBe(true)
    expect((await all(store.query({ prefix: '/peers/' }))).sort()).toEqual(['/peers/a=a2', '/peers/c=c2'])
    // filters, orders, offset and limit apply to the merged records
    const desc = (x: Pair, y: Pair): -1 | 0 | 1 => y.key.toString() < x.key.toString() ? -1 : y.key.toString() > x.key.toString() ? 1 : 0
    expect(await all(store.query({ prefix: '/peers/', orders: [desc] }))).toEqual(['/peers/c=c2', '/peers/a=a2'])
    expect(await all(store.query({ prefix: '/peers/', orders: [desc], offset: 1, limit: 1 }))).toEqual(['/peers/a=a2'])
    expect(await all(store.query({ prefix: '/peers/', filters: [p => text(p.value).startsWith('c')] }))).toEqual(['/peers/c=c2'])
    const keys: string[] = []
    for await (const k of store.queryKeys({ prefix: '/peers/' })) keys.push(k.toString())
    expect(keys.sort()).toEqual(['/peers/a', '/peers/c'])

    // memory is full: a fourth record hears the disk's refusal
    await expect(store.put(new Key('/peers/d'), bytes('d2'))).rejects.toMatchObject({ code: 'STORAGE_FULL' })
    expect(stats.overflow).toBe(1)
    // other keys are the datastore's as before
    await expect(store.put(new Key('/aap/x'), bytes('x'))).rejects.toMatchObject({ code: 'STORAGE_FULL' })

    faulty.failing = false
    await store.put(a, bytes('a3'))
    expect(stats.held).toBe(2)
    expect(text(await faulty.inner.get(a))).toBe('a3')
    expect(text(await store.get(a))).toBe('a3')
    await store.delete(b)
    await store.put(c, bytes('c3'))
    expect(stats.held).toBe(0)
    expect((await all(store.query({ prefix: '/peers/' }))).sort()).toEqual(['/peers/a=a3', '/peers/c=c3'])
  })

  it('leaves every query that cannot reach /peers/ to the datastore, its limit applied there', async () => {
    // found by a review: with one record in memory, every query was merged, so a DHT query of one record read 1000
    const inner = new MemoryDatastore()
    for (let i = 0; i < 1000; i++) await inner.put(new Key(`/dht/provider/k/${String(i).padStart(4, '0')}`), bytes('p'))
    let read = 0
    const counting = new Proxy(inner, {
      get (target, prop) {
        if (prop === 'query') return async function * (q: Query, o?: unknown) { for await (const p of target.query(q, o as never)) { read++; yield p } }
        const v: unknown = Reflect.get(target, prop, target)
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
      }
    })
    const faulty = new FaultyDatastore(counting)
    const { store, stats } = keepPeerRecordsInMemory(guardWrites(faulty.store), silentLogger())
    faulty.failing = true
    await store.put(new Key('/peers/x'), bytes('x'))
    faulty.failing = false
    expect(stats.held).toBe(1)
    const got = await all(store.query({ prefix: '/dht/provider/', limit: 1 }))
    expect(got).toEqual(['/dht/provider/k/0000=p'])
    expect(read).toBeLessThanOrEqual(2)
  })

  it('passes on a failure that is not the disk refusing the write', async () => {
    const inner = new MemoryDatastore()
    const broken = new Proxy(inner, {
      get (target, prop) {
        if (prop === 'put') return async () => { throw new TypeError('not a disk fault') }
        const v: unknown = Reflect.get(target, prop, target)
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
      }
    })
    const { store, stats } = keepPeerRecordsInMemory(broken, silentLogger())
    await expect(store.put(new Key('/peers/a'), bytes('a'))).rejects.toThrow(TypeError)
    expect(stats.kept).toBe(0)
  })

  it('drops a peer-store write made after the store closed, without calling the disk failing', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-peer-store-closed-'))
    try {
      const level = new LevelDatastore(join(dir, 'ds'))
      await level.open()
      const guarded = guardWrites(level)
      const { store, stats } = keepPeerRecordsInMemory(guarded, silentLogger())
      await store.put(new Key('/peers/a'), bytes('a1'))
      await (guarded as unknown as { close: () => Promise<void> }).close()
      // libp2p still writing a peer record while the node stops: nothing to keep, nothing refused
      await store.put(new Key('/peers/a'), bytes('a2'))
      await store.delete(new Key('/peers/a'))
      expect(stats).toEqual({ held: 0, kept: 0, overflow: 0, afterClose: 2 })
      expect(guarded.health.failing).toBeUndefined()
      expect(guarded.health.refusedWrites).toBe(0)
      // any other write after close hears why, typed
      await expect(store.put(new Key('/aap/x'), bytes('x'))).rejects.toMatchObject({ code: 'INTERNAL', details: { reason: 'closed' } })
      expect(guarded.health.failing).toBeUndefined()
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})
