/**
 * The compact memory datastore keeps a small value without the large
 * buffer it was a view into, whatever way it is put (put, putMany, batch).
 */
import { Key } from 'interface-datastore'
import { describe, expect, it } from 'vitest'
import { CompactMemoryDatastore } from '../src/storage/compact-memory.ts'

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
})
