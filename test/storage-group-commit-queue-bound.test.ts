/**
 * The group committer's bound on what waits for the disk
 * (STORAGE_QUEUE_MAX_BYTES): lingering writes (copies that can be fetched
 * again) are refused past it while a batch is being written; writes that do
 * not linger (the node's own runs and records) never are; and a burst that
 * fills the queue of an idle committer goes to the disk instead of being
 * refused.
 */
import { MemoryDatastore } from 'datastore-core'
import { Key, type Batch, type Datastore } from 'interface-datastore'
import { describe, expect, it } from 'vitest'
import { STORAGE_QUEUE_MAX_BYTES } from '../src/storage/constants.ts'
import { GroupCommitter, queueFull } from '../src/storage/group-commit.ts'
import { rejectsWith } from './helpers.ts'

const VALUE = new Uint8Array(64 * 1024)

/** A memory datastore whose batch commits wait while it is stalled. */
function stallableStore (): { ds: Datastore, stall: () => void, open: () => void } {
  const inner = new MemoryDatastore()
  let gate: PromiseWithResolvers<void> | undefined
  const ds = new Proxy(inner, {
    get (target, prop) {
      if (prop === 'batch') {
        return (): Batch => {
          const b = inner.batch()
          return {
            put: (k: Key, v: Uint8Array) => { b.put(k, v) },
            delete: (k: Key) => { b.delete(k) },
            commit: async () => {
              const g = gate
              if (g !== undefined) await g.promise
              await b.commit()
            }
          }
        }
      }
      const v = Reflect.get(target, prop, target)
      return typeof v === 'function' ? v.bind(target) : v
    }
  }) as Datastore
  return {
    ds,
    stall: () => { gate ??= Promise.withResolvers() },
    open: () => {
      gate?.resolve()
      gate = undefined
    }
  }
}

describe('the group committer\'s queue bound', () => {
  it('refuses lingering writes past it behind a stalled batch, never writes that do not linger', async () => {
    const { ds, stall, open } = stallableStore()
    const c = new GroupCommitter(ds)
    stall()
    // the disk stalls on the first batch
    const first = c.write([[new Key('/first'), VALUE]])
    const accepted: Array<Promise<void>> = []
    // the refusal comes at once, before the write is queued
    while (c.refused === 0) accepted.push(c.write([[new Key(`/copy/${accepted.length}`), VALUE]], { lingerMs: 10 }))
    const refusal = accepted.pop() as Promise<void>
    const err = await rejectsWith(refusal, 'STORAGE_FULL')
    expect(queueFull(err)).toBe(true)
    expect(err.details?.reason).toBe('queue_full')
    expect(c.refused).toBe(1)
    expect(c.queuedBytes).toBeLessThanOrEqual(STORAGE_QUEUE_MAX_BYTES)
    expect(c.queuedBytes + VALUE.byteLength).toBeGreaterThan(STORAGE_QUEUE_MAX_BYTES)

    // the node's own records are taken whatever waits, past the bound too
    const own = c.write(Array.from({ length: 32 }, (_, j) => [new Key(`/own/${j}`), VALUE] as [Key, Uint8Array]))
    expect(c.queuedBytes).toBeGreaterThan(STORAGE_QUEUE_MAX_BYTES)
    await rejectsWith(c.write([[new Key('/copy/late'), VALUE]], { lingerMs: 10 }), 'STORAGE_FULL')
    expect(c.refused).toBe(2)

    // the disk is back: everything taken is written, nothing refused is
    open()
    await Promise.all([first, own, ...accepted])
    expect(c.queuedBytes).toBe(0)
    expect(await ds.has(new Key(`/copy/${accepted.length - 1}`))).toBe(true)
    expect(await ds.has(new Key(`/copy/${accepted.length}`))).toBe(false)
    expect(await ds.has(new Key('/copy/late'))).toBe(false)
    expect(await ds.has(new Key('/own/31'))).toBe(true)
    // and copies are taken again
    await c.write([[new Key('/copy/after'), VALUE]], { lingerMs: 10 })
    expect(await ds.has(new Key('/copy/after'))).toBe(true)
  })

  it('sends a burst that fills the queue of an idle committer to the disk instead of refusing it', async () => {
    const { ds } = stallableStore()
    const c = new GroupCommitter(ds)
    // within one turn (no batch ends meanwhile): the first queue's worth goes out, the next waits behind it
    const n = Math.floor(1.5 * STORAGE_QUEUE_MAX_BYTES / VALUE.byteLength)
    const writes = Array.from({ length: n }, async (_, i) => c.write([[new Key(`/burst/${i}`), VALUE]], { lingerMs: 10 }))
    await Promise.all(writes)
    expect(c.refused).toBe(0)
    expect(await ds.has(new Key(`/burst/${n - 1}`))).toBe(true)
  })
})
