/**
 * The fence of the run index (src/runs/run-index.ts): a listing does not
 * pass the place of a run still being saved, so a cursor never skips it.
 * Before, a LevelDB iterator read the snapshot taken when it opened: a run
 * still being saved then, whose save finished while the page read on, was
 * not in the snapshot and no longer pending when the page reached the run
 * after it; the page listed that one and its cursor passed the run for good
 * (oldest first from a cursor, and newest first without one). (A listing of
 * both sides still moves on to the delegated side past an executing run
 * being saved after the last key read: see session 59's note.)
 *
 * The index is driven on a real LevelDB datastore, each write's batch
 * committed when the test lets it (a slow disk).
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Datastore } from 'interface-datastore'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { openDatastore } from '../src/identity/identity.ts'
import { componentLogger } from '../src/logger.ts'
import type { Run } from '../src/runlog/types.ts'
import { RunIndex, type PageRequest, type RunFilter, type RunSide } from '../src/runs/run-index.ts'
import { runRecord } from './fixtures/run-record.ts'

const ME = 'agent-me'

function runOf (id: string, side: RunSide): Run {
  return runRecord({
    run_id: `run-${id}`,
    agent_id: side === 'executing' ? ME : `agent-${id}`,
    delegator: side === 'executing' ? `agent-${id}` : ME,
    correlation_id: 'task-fence',
    capability: { capability_id: 'cap:fence', version: '1.0.0' },
    created_at: new Date().toISOString()
  })
}

type LevelIterator = AsyncIterable<[string, Uint8Array | undefined]> & { close: () => Promise<void> }
interface LevelIterating { iterator: (opts: Record<string, unknown>) => LevelIterator }

describe('a listing does not pass a run still being saved', () => {
  let dir: string
  let ds: Datastore & { close?: () => Promise<void> }
  let index: RunIndex

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'aap-listing-fence-'))
    ds = await openDatastore(dir)
    index = new RunIndex({ datastore: ds, log: componentLogger(undefined, 'test:listing-fence'), agentId: ME, records: async function * () {} })
    await index.open()
  })
  afterEach(async () => {
    await ds.close?.()
    await rm(dir, { recursive: true, force: true })
  })

  /** Index `run` on `side`, its batch committed once `gate` resolves; resolves once it is. */
  async function write (side: RunSide, run: Run, gate: Promise<void> = Promise.resolve()): Promise<void> {
    await index.write(side, run, async (stage) => {
      const batch = ds.batch()
      stage(batch)
      await gate
      await batch.commit()
    }, true)
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

  it('oldest first: a run whose save finishes after the page opened its iterator is listed on a later page', async () => {
    const held = Promise.withResolvers<void>()
    // X takes its place first and its save is slow; Y, placed after it, is saved at once
    const x = write('executing', runOf('x', 'executing'), held.promise)
    await write('executing', runOf('y', 'executing'))
    // the page's snapshot holds Y, not X; X's save finishes before the page reaches Y
    const first = await pageWhile(async () => { held.resolve(); await x }, { side: 'executing' }, { limit: 1 })
    const ids = await walk({ side: 'executing' }, { limit: 10 }, first)
    expect(ids).toEqual(['run-x', 'run-y'])
  })

  it('newest first: a run whose save finishes after the page opened its iterator stops the page before the older ones', async () => {
    await write('executing', runOf('a', 'executing'))
    const held = Promise.withResolvers<void>()
    const b = write('executing', runOf('b', 'executing'), held.promise)
    await write('executing', runOf('c', 'executing'))
    const first = await pageWhile(async () => { held.resolve(); await b }, { side: 'executing' }, { limit: 10, order: 'newest' })
    expect(first.executing).toEqual(['run-c'])
    const ids = await walk({ side: 'executing' }, { limit: 10, order: 'newest' }, first)
    expect(ids).toEqual(['run-c', 'run-b', 'run-a'])
  })
})
