/**
 * The compact memory datastore keeps a small value without the large
 * buffer it was a view into, whatever way it is put (put, putMany, batch),
 * and answers every query as datastore-core's memory datastore does, in key
 * order, reading only the keys under the query's prefix.
 */
import { MemoryDatastore } from 'datastore-core'
import fc from 'fast-check'
import { Key, type Datastore } from 'interface-datastore'
import { describe, expect, it } from 'vitest'
import { CompactMemoryDatastore } from '../src/storage/compact-memory.ts'
import { MEMORY_STORE_INSERTS_ONE_BY_ONE_MAX, MEMORY_STORE_STALE_KEYS_MIN } from '../src/storage/constants.ts'

/** Keys from a small alphabet, so prefixes often share keys, and some that are prefixes of others. */
const segment = fc.string({ unit: fc.constantFrom('a', 'b', 'B', '0', 'é', '-'), minLength: 1, maxLength: 3 })
const keyText = fc.array(segment, { minLength: 1, maxLength: 3 }).map(parts => '/' + parts.join('/'))
const op = fc.oneof(
  fc.record({ put: keyText, byte: fc.nat({ max: 255 }) }),
  fc.record({ del: keyText })
)

async function apply (ds: Datastore, ops: ReadonlyArray<{ put: string, byte: number } | { del: string }>): Promise<void> {
  for (const o of ops) {
    if ('put' in o) await ds.put(new Key(o.put), Uint8Array.of(o.byte))
    else await ds.delete(new Key(o.del))
  }
}

async function read (ds: Datastore, prefix: string | undefined): Promise<{ pairs: Array<[string, number]>, keys: string[] }> {
  const q = prefix === undefined ? {} : { prefix }
  const pairs: Array<[string, number]> = []
  for await (const p of ds.query(q)) pairs.push([p.key.toString(), p.value[0]!])
  const keys: string[] = []
  for await (const k of ds.queryKeys(q)) keys.push(k.toString())
  return { pairs, keys }
}

describe('CompactMemoryDatastore', () => {
  it('stores a view into a large buffer in a buffer of its own size, and a whole buffer as it is', async () => {
    const ds = new CompactMemoryDatastore()
    const read = new Uint8Array(64 * 1024).map((_, i) => i % 251)
    const view = read.subarray(100, 110)
    await ds.put(new Key('/a'), view)
    const a = await ds.get(new Key('/a'))
    expect(a).toEqual(view)
    expect(a.buffer.byteLength).toBe(10)
    const whole = new Uint8Array([1, 2, 3])
    await ds.put(new Key('/w'), whole)
    expect(await ds.get(new Key('/w'))).toBe(whole)
    for await (const _ of ds.putMany([{ key: new Key('/m'), value: read.subarray(0, 5) }])) { /* drain */ }
    expect((await ds.get(new Key('/m'))).buffer.byteLength).toBe(5)
    const b = ds.batch()
    b.put(new Key('/b'), read.subarray(5, 12))
    await b.commit()
    const got = await ds.get(new Key('/b'))
    expect(got).toEqual(read.subarray(5, 12))
    expect(got.buffer.byteLength).toBe(7)
  })

  it('copies a Buffer view too (a Buffer\'s own slice() is a view of the whole read)', async () => {
    const ds = new CompactMemoryDatastore()
    const read = Buffer.alloc(64 * 1024, 7)
    await ds.put(new Key('/a'), read.subarray(100, 110))
    const a = await ds.get(new Key('/a'))
    expect(a.byteLength).toBe(10)
    expect(a.buffer.byteLength).toBe(10)
  })

  it('stays in step with datastore-core\'s memory datastore when queries come between many puts and deletes', async () => {
    // enough keys that new ones are merged in by the batch (more than one by one) and deleted ones dropped in one pass
    const keyOf = (i: number): string => `/k/${(i * 7919) % 5000}/${i % 3}`
    await fc.assert(fc.asyncProperty(fc.array(fc.record({ from: fc.nat({ max: 4999 }), puts: fc.nat({ max: 2 * MEMORY_STORE_STALE_KEYS_MIN }), dels: fc.nat({ max: 2 * MEMORY_STORE_STALE_KEYS_MIN }), prefix: fc.constantFrom(undefined, '/k/1', '/k/42/', '/k') }), { minLength: 1, maxLength: 6 }), async (rounds) => {
      const ours = new CompactMemoryDatastore()
      const reference = new MemoryDatastore()
      for (const r of rounds) {
        const ops: Array<{ put: string, byte: number } | { del: string }> = []
        for (let i = 0; i < r.puts; i++) ops.push({ put: keyOf(r.from + i), byte: i & 0xff })
        for (let i = 0; i < r.dels; i++) ops.push({ del: keyOf(r.from + 2 * i) })
        await apply(ours, ops)
        await apply(reference, ops)
        const got = await read(ours, r.prefix)
        const want = await read(reference, r.prefix)
        expect(got.keys).toEqual([...want.keys].sort())
        expect(got.pairs.map(([k]) => k)).toEqual(got.keys)
      }
    }), { numRuns: 25 })
    expect(MEMORY_STORE_INSERTS_ONE_BY_ONE_MAX).toBeLessThan(MEMORY_STORE_STALE_KEYS_MIN)
  })

  it('drops the deleted keys of a churned prefix when it reads it, not only once they are half the store', async () => {
    const ds = new CompactMemoryDatastore()
    const v = Uint8Array.of(1)
    for (let i = 0; i < 2000; i++) ds.put(new Key(`/big/${String(i).padStart(6, '0')}`), v)
    // a queue: put, read, drop the oldest (the reads paid for every key it ever held)
    for (let i = 0; i < 3000; i++) {
      ds.put(new Key(`/q/${String(i).padStart(6, '0')}`), v)
      let n = 0
      for await (const _ of ds.query({ prefix: '/q/' })) n++
      expect(n).toBe(Math.min(i + 1, 10))
      if (i >= 9) ds.delete(new Key(`/q/${String(i - 9).padStart(6, '0')}`))
    }
    const sorted = (ds as unknown as { sorted: string[] }).sorted
    expect(sorted.length).toBeLessThanOrEqual(2000 + 11)
  })

  it('answers prefix queries with the entries of datastore-core\'s memory datastore, in key order', async () => {
    await fc.assert(fc.asyncProperty(fc.array(op, { maxLength: 60 }), fc.option(fc.oneof(keyText, keyText.map(k => k.slice(0, -1)), fc.constant('/')), { nil: undefined }), async (ops, prefix) => {
      const ours = new CompactMemoryDatastore()
      const reference = new MemoryDatastore()
      await apply(ours, ops)
      await apply(reference, ops)
      const got = await read(ours, prefix)
      const want = await read(reference, prefix)
      const byKey = (a: [string, number], b: [string, number]): number => a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0
      // the same entries, and ours in key order (the reference keeps them in insertion order)
      expect(got.pairs).toEqual([...want.pairs].sort(byKey))
      expect(got.keys).toEqual(got.pairs.map(([k]) => k))
      expect([...got.keys].sort()).toEqual([...want.keys].sort())
    }), { numRuns: 300 })
  })

  it('reads a query as it was when it started, leaving out what is deleted meanwhile', async () => {
    const ds = new CompactMemoryDatastore()
    for (const k of ['/p/a', '/p/b', '/p/c', '/p/d', '/q/a']) await ds.put(new Key(k), Uint8Array.of(1))
    const seen: string[] = []
    for await (const { key } of ds.query({ prefix: '/p/' })) {
      seen.push(key.toString())
      if (seen.length === 1) {
        await ds.delete(new Key('/p/c'))
        await ds.put(new Key('/p/bb'), Uint8Array.of(2))
      }
    }
    expect(seen).toEqual(['/p/a', '/p/b', '/p/d'])
    const keys: string[] = []
    for await (const k of ds.queryKeys({ prefix: '/p' })) keys.push(k.toString())
    expect(keys).toEqual(['/p/a', '/p/b', '/p/bb', '/p/d'])
  })

  it('a prefix query visits only the keys under its prefix', async () => {
    const ds = new CompactMemoryDatastore()
    for (let i = 0; i < 1000; i++) await ds.put(new Key(`/peers/${String(i).padStart(4, '0')}`), Uint8Array.of(1))
    await ds.put(new Key('/dht/provider/x/1'), Uint8Array.of(1))
    await ds.put(new Key('/dht/provider/x/2'), Uint8Array.of(1))
    // count the keys the query reads before its prefix filter: the datastore's own _all
    let visited = 0
    for (const _ of ds._all({ prefix: '/dht/provider/x' })) visited++
    expect(visited).toBe(2)
  })
})

