/**
 * Reads across the write guard's reopen of a LevelDB store (write-guard.ts,
 * reopen.ts): after a refused write the store is closed and opened again
 * under a running node, so a read may meet it closed. A point read waits for
 * the reopen, and a range read or a query the close cut short goes on after
 * the last key it gave, with nothing skipped or given twice (also when the
 * reader itself waited out the reopen before its next step).
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Key } from 'interface-datastore'
import { afterEach, describe, expect, it } from 'vitest'
import { openDatastore } from '../src/identity/identity.ts'
import { groupCommitting } from '../src/storage/group-commit.ts'
import { readRange } from '../src/storage/range.ts'
import { hasKey, readOptional } from '../src/storage/read.ts'
import { levelReopener } from '../src/storage/reopen.ts'
import { guardWrites } from '../src/storage/write-guard.ts'

const KEYS = 200
/** Values large enough that a LevelDB iterator holds a few of them at a time, not the whole range. */
const VALUE_BYTES = 4096

describe('reads across a reopen of the store', () => {
  const dirs: string[] = []
  const closers: Array<() => Promise<void>> = []

  afterEach(async () => {
    for (const close of closers.splice(0)) await close()
    for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true })
  })

  async function store () {
    const dir = await mkdtemp(join(tmpdir(), 'aap-reopen-reads-'))
    dirs.push(dir)
    const ds = await openDatastore(dir)
    closers.push(async () => { await ds.close?.() })
    const reopener = levelReopener(ds)
    if (reopener === undefined) throw new Error('a LevelDB datastore has a reopener')
    const guarded = guardWrites(ds, reopener)
    const runData = groupCommitting(guarded)
    const b = runData.batch()
    for (let i = 0; i < KEYS; i++) b.put(new Key(`/r/${String(i).padStart(4, '0')}`), new Uint8Array(VALUE_BYTES).fill(i % 256))
    await b.commit()
    const db = (ds as unknown as { db: { once: (event: string, fn: () => void) => void } }).db
    // what a refused write leaves: the next write (here a probe) closes and opens the store again; `closing`
    // settles once the LevelDB is closing, `done` once it is open again
    const reopen = (): { closing: Promise<void>, done: Promise<void> } => {
      const closing = new Promise<void>(resolve => { db.once('closing', resolve) })
      reopener.markDue()
      return { closing, done: guarded.probe() }
    }
    return { runData, guarded, reopen, dir }
  }

  for (const reverse of [false, true]) {
    it(`goes on with a range read the reopen closed under it, after its last key${reverse ? ' (newest first)' : ''}`, async () => {
      const { runData, guarded, reopen } = await store()
      const got: string[] = []
      let reopened: Promise<void> | undefined
      for await (const { key } of readRange(runData, { prefix: '/r/', reverse })) {
        got.push(key)
        if (got.length === 10) {
          const r = reopen()
          reopened = r.done
          // the store is closed under the read before it asks for its next entry
          await r.closing
        }
      }
      await reopened
      const want = Array.from({ length: KEYS }, (_, i) => `/r/${String(i).padStart(4, '0')}`)
      expect(got).toEqual(reverse ? want.reverse() : want)
      expect(guarded.health.reopens).toBe(1)
    })
  }

  it('answers a point read made while the store is closed for its reopen', async () => {
    const { runData, guarded, reopen } = await store()
    const r = reopen()
    await r.closing
    expect(guarded.reopening).toBe(true)
    const [held, value, missing] = await Promise.all([
      hasKey(runData, new Key('/r/0007')),
      readOptional(runData, new Key('/r/0008')),
      hasKey(runData, new Key('/r/none'))
    ])
    await r.done
    expect([held, value?.byteLength, value?.[0], missing]).toEqual([true, VALUE_BYTES, 8, false])
    expect(guarded.health.reopens).toBe(1)
  })

  it('leaves the store closed, and its directory free, when the node closes it while a reopen is under way', async () => {
    const { guarded, reopen, dir } = await store()
    const r = reopen()
    const refused = r.done.then(() => undefined, (err: unknown) => err)
    await (guarded as typeof guarded & { close: () => Promise<void> }).close()
    // the probe that asked for the reopen may land or be refused as closed; either way nothing opened the store again
    const err = await refused
    if (err !== undefined) expect((err as { details?: { reason?: string } }).details?.reason).toBe('closed')
    const again = await openDatastore(dir)
    closers.push(async () => { await again.close?.() })
    expect(await again.has(new Key('/r/0001'))).toBe(true)
  })

  // run-index.ts list(): each entry of the range may be followed by `await this.entry(...)`, a point read that
  // waits (guarded-reads.ts) until the reopen is over; the range read's next step then meets its
  // iterator closed, with the reopen already settled
  it('goes on with a range read whose consumer awaited a point read across the reopen', async () => {
    const { runData, reopen } = await store()
    const got: string[] = []
    let err: unknown
    try {
      for await (const { key } of readRange(runData, { prefix: '/r/' })) {
        got.push(key)
        if (got.length === 10) {
          const r = reopen()
          await r.closing
          // as run-index.ts does for an entry whose state it must look up
          await readOptional(runData, new Key('/r/0003'))
        }
      }
    } catch (e) {
      err = e
    }
    expect({ err: (err as { code?: string } | undefined)?.code, n: got.length }).toEqual({ err: undefined, n: KEYS })
  })

  // runs/store.ts all()/notices/outgoing, event-log.ts runsOf, task-records, libp2p's peer store and kad-dht all
  // read through the datastore's query: a reopen in the middle cuts it with LevelDB's raw error
  it('answers a datastore query the reopen closed under it', async () => {
    const { runData, reopen } = await store()
    let n = 0
    let err: unknown
    let done: Promise<void> | undefined
    try {
      for await (const _ of runData.query({ prefix: '/r/' })) {
        n++
        if (n === 10) {
          const r = reopen()
          done = r.done
          await r.closing
        }
      }
    } catch (e) {
      err = e
    }
    await done
    expect({ err: (err as { code?: string } | undefined)?.code, n }).toEqual({ err: undefined, n: KEYS })
  })
})
