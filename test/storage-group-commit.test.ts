/**
 * The group committer after a slow or stalled disk: writes handed over while a
 * batch is written wait for the next batch, and went out, before, as one batch
 * of everything queued meanwhile (4,000 writes in session 49's review). They go
 * in batches of at most STORAGE_BATCH_MAX_OPS now, in the order they were
 * handed over.
 */
import { MemoryDatastore } from 'datastore-core'
import { Key, type Batch, type Datastore } from 'interface-datastore'
import { describe, expect, it } from 'vitest'
import { STORAGE_BATCH_MAX_OPS } from '../src/storage/constants.ts'
import { GroupCommitter } from '../src/storage/group-commit.ts'

/** A memory datastore whose batch commits wait for `open()`, each commit's op count recorded. */
function stalledStore (): { ds: Datastore, open: () => void, commits: number[] } {
  const inner = new MemoryDatastore()
  let release!: () => void
  let gate = new Promise<void>(resolve => { release = resolve })
  const commits: number[] = []
  const ds = new Proxy(inner, {
    get (target, prop) {
      if (prop === 'batch') {
        return (): Batch => {
          const b = inner.batch()
          let n = 0
          return {
            put: (k: Key, v: Uint8Array) => { n++; b.put(k, v) },
            delete: (k: Key) => { n++; b.delete(k) },
            commit: async () => { commits.push(n); await gate; await b.commit() }
          }
        }
      }
      const v = Reflect.get(target, prop, target)
      return typeof v === 'function' ? v.bind(target) : v
    }
  }) as Datastore
  return { ds, open: () => { release(); gate = Promise.resolve() }, commits }
}

describe('the group committer after a stalled disk', () => {
  it('writes what queued meanwhile in bounded batches, in order, a larger single write alone', async () => {
    const { ds, open, commits } = stalledStore()
    const c = new GroupCommitter(ds)
    const value = (n: number): Uint8Array => new Uint8Array([n & 0xff, n >> 8])
    const first = c.write([[new Key('/first'), value(0)]])
    // the disk stalls on the first batch; gossip copies keep arriving (lingering, as CopyStore hands them over),
    // one write much larger than a batch among them, and every write names /last, so the last one must win
    const writes: Array<Promise<void>> = []
    for (let i = 1; i <= 4000; i++) {
      writes.push(c.write([[new Key(`/copy/${i}`), value(i)], [new Key('/last'), value(i)]], { lingerMs: 10 }))
      if (i === 1500) writes.push(c.write(Array.from({ length: STORAGE_BATCH_MAX_OPS + 100 }, (_, j) => [new Key(`/big/${j}`), value(j)] as [Key, Uint8Array])))
    }
    open()
    await first
    await Promise.all(writes)
    // 1 + 8000 small ops + one write of STORAGE_BATCH_MAX_OPS + 100
    expect(commits.reduce((a, b) => a + b, 0)).toBe(1 + 8000 + STORAGE_BATCH_MAX_OPS + 100)
    expect(commits.filter(n => n > STORAGE_BATCH_MAX_OPS)).toEqual([STORAGE_BATCH_MAX_OPS + 100])
    expect(commits.length).toBeGreaterThan(4)
    expect(await ds.get(new Key('/last'))).toEqual(value(4000))
    expect(await ds.get(new Key('/copy/4000'))).toEqual(value(4000))
  })
})
