/**
 * The order of the run index (src/runs/run-index.ts): runs are listed in the
 * order this node stored them, and a page does not pass the place of a run
 * still being written, even one whose save lands after the page's LevelDB
 * snapshot was taken (the page fences against the runs pending when it began
 * to read: before, such a run was passed by the cursor for good). The page
 * waits for such a save and reads on (before, it stopped, handing out the
 * cursor it was given when it had read nothing), at the end of the executing
 * side of an unfiltered listing too (before, it went on to the delegated
 * side, whose cursor never comes back). Before, the order key was the run's `created_at`,
 * taken before the run was stored: of two runs created at once, the one
 * created first could land after a cursor had passed its place and was never
 * listed; and a delegated record sorted by its executor's clock, so a hostile
 * executor could keep a run at the top of `order=newest` with a created_at in
 * year 9999.
 *
 * The index is driven on a real LevelDB datastore, each write's batch
 * committed when the test lets it (a slow disk, or a write that waited on a
 * lookup before it).
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Datastore } from 'interface-datastore'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { openDatastore } from '../src/identity/identity.ts'
import { componentLogger } from '../src/logger.ts'
import type { Run } from '../src/runlog/types.ts'
import { RunIndex, type PageRequest, type RunFilter, type RunSide } from '../src/runs/run-index.ts'
import { rawKey } from '../src/storage/range.ts'
import { until } from './helpers.ts'
import { runRecord } from './fixtures/run-record.ts'

const ME = 'agent-me'

function runOf (id: string, createdAt: string, side: RunSide): Run {
  return runRecord({
    run_id: `run-${id}`,
    agent_id: side === 'executing' ? ME : `agent-${id}`,
    delegator: side === 'executing' ? `agent-${id}` : ME,
    correlation_id: 'task-order',
    capability: { capability_id: 'cap:order', version: '1.0.0' },
    created_at: createdAt
  })
}

type LevelIterator = AsyncIterable<[string, Uint8Array | undefined]> & { close: () => Promise<void> }
interface LevelIterating { iterator: (opts: Record<string, unknown>) => LevelIterator }

describe('the run index lists runs in the order they were stored', () => {
  let dir: string
  let ds: Datastore & { close?: () => Promise<void> }
  let index: RunIndex

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aap-listing-order-'))
    ds = await openDatastore(dir)
    index = new RunIndex({ datastore: ds, log: componentLogger(undefined, 'test:listing-order'), agentId: ME, records: async function * () {} })
    await index.open()
  })
  afterEach(async () => {
    vi.useRealTimers()
    await ds.close?.()
    await rm(dir, { recursive: true, force: true })
  })

  /** Index `run` on `side`, its batch committed once `gate` resolves; resolves once it is. `placed`: told once it has its place. */
  async function write (side: RunSide, run: Run, gate: Promise<void> = Promise.resolve(), placed?: () => void): Promise<void> {
    await index.write(side, run, async (stage) => {
      const batch = ds.batch()
      stage(batch)
      placed?.()
      await gate
      await batch.commit()
    }, true)
  }

  /** Every id of the listing, page by page from the cursor; the pages' ids each time. */
  async function pages (order: 'oldest' | 'newest', limit: number, from?: string): Promise<{ ids: string[], cursor: string | null }> {
    const page = await index.page({ side: 'executing' }, { limit, order, ...(from === undefined ? {} : { cursor: from }) })
    return { ids: page.executing, cursor: page.next_cursor }
  }

  /**
   * One page read while `settle` happens: the first LevelDB iterator the page
   * opens has taken its snapshot before `settle` is started, and reads on
   * once it is done.
   */
  async function pageWhile (settle: () => Promise<void>, filter: RunFilter, req: PageRequest): Promise<Awaited<ReturnType<RunIndex['page']>>> {
    const db = (ds as unknown as { db: LevelIterating }).db
    const orig = db.iterator.bind(db)
    let done = false
    db.iterator = (opts) => {
      const it = orig(opts)
      if (done) return it
      done = true
      return {
        close: async () => { await it.close() },
        async * [Symbol.asyncIterator] () {
          await settle()
          yield * it
        }
      }
    }
    try {
      return await index.page(filter, req)
    } finally {
      db.iterator = orig
    }
  }

  /** Executing run A and delegated run D stored, then executing run B placed, its save held until `held` resolves. */
  async function runBeingWritten (): Promise<{ held: PromiseWithResolvers<void>, b: Promise<void> }> {
    await write('executing', runOf('a', new Date().toISOString(), 'executing'))
    await write('delegated', runOf('d', new Date().toISOString(), 'delegated'))
    const held = Promise.withResolvers<void>()
    const placed = Promise.withResolvers<void>()
    const b = write('executing', runOf('b', new Date().toISOString(), 'executing'), held.promise, placed.resolve)
    await placed.promise
    return { held, b }
  }

  /** Every id of a listing, page by page, until its cursor is null. */
  async function walk (filter: RunFilter, req: PageRequest, first: Awaited<ReturnType<RunIndex['page']>>): Promise<string[]> {
    const ids = [...first.executing, ...first.delegated]
    let cursor = first.next_cursor
    while (cursor !== null) {
      const page = await index.page(filter, { ...req, cursor })
      ids.push(...page.executing, ...page.delegated)
      cursor = page.next_cursor
    }
    return ids
  }

  it('oldest first: a run created first but stored last is on the page after the one that passed its place', async () => {
    const held = Promise.withResolvers<void>()
    // X is created first and waits (its batch held); Y, created after it, is stored at once
    const x = write('executing', runOf('x', '2026-12-05T10:00:00.000Z', 'executing'), held.promise)
    await write('executing', runOf('y', '2026-12-05T10:00:00.005Z', 'executing'))
    const first = await pages('oldest', 1)
    // the page stops before Y: X, still being written, has its place before it
    expect(first.ids).toEqual([])
    expect(first.cursor).not.toBeNull()
    expect(index.stats.fenced).toBe(1)
    held.resolve()
    await x
    const second = await pages('oldest', 10, first.cursor as string)
    expect(second.ids).toEqual(['run-x', 'run-y'])
    expect(second.cursor).toBeNull()
  })

  it('newest first: a run still being written between two stored ones stops the page before the older one', async () => {
    await write('executing', runOf('a', '2026-12-05T10:00:00.000Z', 'executing'))
    const held = Promise.withResolvers<void>()
    const b = write('executing', runOf('b', '2026-12-05T10:00:00.001Z', 'executing'), held.promise)
    await write('executing', runOf('c', '2026-12-05T10:00:00.002Z', 'executing'))
    const first = await pages('newest', 10)
    expect(first.ids).toEqual(['run-c'])
    expect(first.cursor).not.toBeNull()
    held.resolve()
    await b
    const rest = await pages('newest', 10, first.cursor as string)
    expect(rest.ids).toEqual(['run-b', 'run-a'])
    expect(rest.cursor).toBeNull()
  })

  it('a write that failed holds no place: the listing goes on past it', async () => {
    const failing = Promise.withResolvers<void>()
    const f = write('executing', runOf('f', '2026-12-05T10:00:00.000Z', 'executing'), failing.promise)
    await write('executing', runOf('g', '2026-12-05T10:00:00.001Z', 'executing'))
    failing.reject(new Error('the disk refused the batch'))
    await expect(f).rejects.toThrow('the disk refused the batch')
    // the failed write holds no place any more: the listing goes on past it
    const all = await pages('oldest', 10)
    expect(all.ids).toEqual(['run-g'])
    expect(all.cursor).toBeNull()
  })

  it('two runs stored in one millisecond, with a page read between them, are both listed', async () => {
    // the clock stands still: both runs are stored in the same millisecond
    vi.useFakeTimers({ toFake: ['Date'] })
    vi.setSystemTime(Date.parse('2026-12-05T10:00:00.000Z'))
    await write('executing', runOf('zzz', '2026-12-05T09:00:00.000Z', 'executing'))
    const first = await pages('oldest', 1)
    expect(first.ids).toEqual(['run-zzz'])
    // before: the same instant, and 'run-aaa' sorts before 'run-zzz', where the cursor already is
    await write('executing', runOf('aaa', '2026-12-05T09:00:00.000Z', 'executing'))
    expect((await pages('oldest', 10, first.cursor as string)).ids).toEqual(['run-aaa'])
  })

  it('after a restart with the clock stepped back, new runs still go after the last one indexed', async () => {
    await write('executing', runOf('before', '2026-12-05T10:00:00.000Z', 'executing'))
    const first = await pages('oldest', 1)
    expect(first.ids).toEqual(['run-before'])
    // the node restarts on the same data dir, its clock a minute behind
    vi.useFakeTimers({ toFake: ['Date'] })
    vi.setSystemTime(Date.now() - 60_000)
    index = new RunIndex({ datastore: ds, log: componentLogger(undefined, 'test:listing-order'), agentId: ME, records: async function * () {} })
    await index.open()
    await write('executing', runOf('after', '2026-12-05T10:00:00.000Z', 'executing'))
    expect((await pages('oldest', 10, first.cursor as string)).ids).toEqual(['run-after'])
  })

  it('an index built by an older version is built again, with no run placed in the future', async () => {
    // an older version's index: its meta at version 1, a delegated record keyed by the created_at its executor signed
    await ds.put(rawKey('/aap/ridx/meta'), new TextEncoder().encode(JSON.stringify({ version: 1, secret: '00'.repeat(32) })))
    const far = runOf('far', '9999-12-31T23:59:59.999Z', 'delegated')
    const older = new RunIndex({ datastore: ds, log: componentLogger(undefined, 'test:listing-order'), agentId: ME, records: async function * (side) { if (side === 'delegated') yield far } })
    await older.open()
    index = older
    await write('delegated', runOf('now', '2026-12-05T10:00:00.000Z', 'delegated'))
    const newest = await index.page({ side: 'delegated' }, { limit: 10, order: 'newest' })
    expect(newest.delegated).toEqual(['run-now', 'run-far'])
    const since = await index.page({ side: 'delegated', since: new Date(Date.now() + 3_600_000).toISOString() }, { limit: 10 })
    expect(since.delegated).toEqual([])
  })

  it('a run placed in the millisecond of a rebuild, or after a restart with the clock behind it, goes after the rebuilt runs', async () => {
    vi.useFakeTimers({ toFake: ['Date'] })
    vi.setSystemTime(Date.parse('2026-12-05T10:00:00.000Z'))
    // an older version's index, rebuilt: the year-9999 record is placed at the rebuild's own instant
    await ds.put(rawKey('/aap/ridx/meta'), new TextEncoder().encode(JSON.stringify({ version: 1, secret: '00'.repeat(32) })))
    const far = runOf('far', '9999-12-31T23:59:59.999Z', 'delegated')
    const records = async function * (side: RunSide): AsyncGenerator<Run> { if (side === 'delegated') yield far }
    index = new RunIndex({ datastore: ds, log: componentLogger(undefined, 'test:listing-order'), agentId: ME, records })
    await index.open()
    const first = await index.page({ side: 'delegated' }, { limit: 1 })
    expect(first.delegated).toEqual(['run-far'])
    // in the rebuild's millisecond (the clock stands still)
    await write('delegated', runOf('now', '2026-12-05T10:00:00.000Z', 'delegated'))
    // a restart, the clock a minute behind
    vi.setSystemTime(Date.parse('2026-12-05T09:59:00.000Z'))
    index = new RunIndex({ datastore: ds, log: componentLogger(undefined, 'test:listing-order'), agentId: ME, records })
    await index.open()
    await write('delegated', runOf('after', '2026-12-05T09:59:00.000Z', 'delegated'))
    // before (keys of a rebuild without a count): neither came after the cursor
    expect((await index.page({ side: 'delegated' }, { limit: 10, cursor: first.next_cursor as string })).delegated).toEqual(['run-now', 'run-after'])
  })

  it('a delegated record is placed by this node\'s clock, not by the created_at its executor signed', async () => {
    await write('delegated', runOf('far', '9999-12-31T23:59:59.999Z', 'delegated'))
    await write('delegated', runOf('now', '2026-12-05T10:00:00.000Z', 'delegated'))
    const page = await index.page({ side: 'delegated' }, { limit: 10, order: 'newest' })
    expect(page.delegated).toEqual(['run-now', 'run-far'])
    // `since` names when this node stored it: the far-future claim does not keep it in every poll
    const since = await index.page({ side: 'delegated', since: '9000-01-01T00:00:00.000Z' }, { limit: 10 })
    expect(since.delegated).toEqual([])
  })

  it('oldest first: a run whose save finishes after the page opened its iterator is listed, before the one after it', async () => {
    const held = Promise.withResolvers<void>()
    // X takes its place first and its save is slow; Y, placed after it, is saved at once
    const x = write('executing', runOf('x', new Date().toISOString(), 'executing'), held.promise)
    await write('executing', runOf('y', new Date().toISOString(), 'executing'))
    // the page's snapshot holds Y, not X; X's save finishes before the page reaches Y
    const first = await pageWhile(async () => { held.resolve(); await x }, { side: 'executing' }, { limit: 1 })
    const ids = await walk({ side: 'executing' }, { limit: 10 }, first)
    expect(ids).toEqual(['run-x', 'run-y'])
  })

  it('newest first: a run whose save finishes after the page opened its iterator is read in a new snapshot, before the older ones', async () => {
    await write('executing', runOf('a', new Date().toISOString(), 'executing'))
    const held = Promise.withResolvers<void>()
    const b = write('executing', runOf('b', new Date().toISOString(), 'executing'), held.promise)
    await write('executing', runOf('c', new Date().toISOString(), 'executing'))
    const first = await pageWhile(async () => { held.resolve(); await b }, { side: 'executing' }, { limit: 10, order: 'newest' })
    // the page stopped at B's place, waited for its save, and read on from C (before, it ended there with a cursor)
    expect(first.executing).toEqual(['run-c', 'run-b', 'run-a'])
    expect(first.next_cursor).toBeNull()
    expect(index.stats.fenced).toBe(0)
  })

  it('a run saved while a page waits at its place is on that page: the page reads on, and its cursor is not the one it was given', async () => {
    await write('executing', runOf('a', new Date().toISOString(), 'executing'))
    const cursor = (await pages('oldest', 1)).cursor as string
    const held = Promise.withResolvers<void>()
    const placed = Promise.withResolvers<void>()
    const b = write('executing', runOf('b', new Date().toISOString(), 'executing'), held.promise, placed.resolve)
    await placed.promise
    await write('executing', runOf('c', new Date().toISOString(), 'executing'))
    // the page meets C while B, placed before it, is being written; B's save lands while the page waits
    const page = index.page({ side: 'executing' }, { limit: 10, cursor })
    await until(() => index.waiting > 0, 'the page waits for the run being written')
    held.resolve()
    await b
    const got = await page
    // before: the page stopped with the cursor it was given (nothing read), which a client following pages takes for a
    // listing that never ends
    expect(got.executing).toEqual(['run-b', 'run-c'])
    expect(got.next_cursor).toBeNull()
  })

  it('an unfiltered listing does not leave the executing side past a run of it still being written: it waits for its save', async () => {
    const { held, b } = await runBeingWritten()
    const page = index.page({}, { limit: 10 })
    await until(() => index.waiting > 0, 'the page waits for the run being written')
    held.resolve()
    await b
    const got = await page
    // before: the page read A, went on to the delegated side, and its cursor there never came back to B
    expect(got.executing).toEqual(['run-a', 'run-b'])
    expect(got.delegated).toEqual(['run-d'])
    expect(index.stats.passedPending).toBe(0)
  })

  it('an unfiltered listing does not wait for a run placed after it began the executing side: that run is newer than the listing', async () => {
    await write('executing', runOf('a', new Date().toISOString(), 'executing'))
    await write('delegated', runOf('d', new Date().toISOString(), 'delegated'))
    const held = Promise.withResolvers<void>()
    let late: Promise<void> | undefined
    // B takes its place once the page has opened its read of the executing side, and its save waits
    const got = await pageWhile(async () => { late = write('executing', runOf('b', new Date().toISOString(), 'executing'), held.promise) }, {}, { limit: 10 })
    expect(got.executing).toEqual(['run-a'])
    expect(got.delegated).toEqual(['run-d'])
    // not waited for (a busy node places runs all the time: every listing would wait out RUN_LIST_PENDING_WAIT_MS)
    expect(index.stats.passedPending).toBe(0)
    held.resolve()
    await late
  })

  it('a save that outlasts RUN_LIST_PENDING_WAIT_MS: the page goes on to the other side and says so in its stats', async () => {
    const { held, b } = await runBeingWritten()
    const got = await index.page({}, { limit: 10 })
    expect(got.executing).toEqual(['run-a'])
    expect(got.delegated).toEqual(['run-d'])
    expect(index.stats.passedPending).toBe(1)
    held.resolve()
    await b
    expect((await index.page({}, { limit: 10 })).executing).toEqual(['run-a', 'run-b'])
  })
})
