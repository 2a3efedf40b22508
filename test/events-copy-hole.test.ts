/**
 * A failed write of an observer's copies must not leave a hole in its log
 * (src/events/copies.ts, src/runlog/event-log.ts cutAtGap). Here the batch
 * holding seq 3 of a run fails only after seq 4 was placed, so seq 4's own
 * batch is written behind it: the log held {1, 2, 4}. Its head was found by
 * bisection past the hole, seq 5 chained on, and every read of the log
 * (history, replay, served sync) stopped at seq 2 for good. The head load
 * now cuts the log at its hole first, and the run is fetched again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { MemoryDatastore } from 'datastore-core'
import type { Batch, Key } from 'interface-datastore'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { collect, type Collector } from './events-helpers.ts'

const WORK = { capability_id: 'cap:copy-hole', version: '1.0.0' }
const TASK = 'task-copy-hole'

/** A memory datastore whose first batch with a seq-3 event waits for `release`, then fails. */
class FailingSeq3Store extends MemoryDatastore {
  readonly started = Promise.withResolvers<void>()
  readonly release = Promise.withResolvers<void>()
  /** Resolves once a batch with a seq-2 event is written. */
  readonly wroteSeq2 = Promise.withResolvers<void>()
  private failed = false
  override batch (): Batch {
    const inner = super.batch()
    const keys: string[] = []
    return {
      put: (key: Key, value: Uint8Array) => { keys.push(key.toString()); inner.put(key, value) },
      delete: (key: Key) => { inner.delete(key) },
      commit: async () => {
        if (!this.failed && keys.some(k => k.startsWith('/aap/log/') && k.endsWith('/0000000003'))) {
          this.failed = true
          this.started.resolve()
          await this.release.promise
          throw new Error('disk write failed (test)')
        }
        await inner.commit()
        if (keys.some(k => k.startsWith('/aap/log/') && k.endsWith('/0000000002'))) this.wroteSeq2.resolve()
      }
    }
  }
}

describe('a failed copy write', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const store = new FailingSeq3Store()
  let onC: Collector

  beforeAll(async () => {
    nodes = await startMesh(3, { nodeOptions: (i) => i === 2 ? { datastore: store } : {} })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      await ctx.progress({ step: 1 })
      // seq 3 in a batch of its own, after seqs 1 and 2 are in the observer's log
      await store.wroteSeq2.promise
      await ctx.progress({ step: 2 })
      // seq 4 only once the observer's write of seq 3 is under way
      await store.started.promise
      await ctx.progress({ step: 3 })
      return { done: true }
    })
    await B.publishCard({ name: 'worker-b', capabilities: [WORK] })
    onC = await collect(C, TASK, { owner: A.agentId, participants: [B.agentId] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('leaves no hole: the log is cut at it and fetched again, and reads see the whole run', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    await onC.until(es => es.some(e => e.run_id === run.run_id && e.seq === 4), 'seq 4 placed at the observer')
    store.release.resolve()
    await until(() => C.events.stats.copyWriteErrors >= 1, 'the failed write')
    await onC.until(es => es.some(e => e.run_id === run.run_id && e.type === 'run.completed'), 'the completion at the observer')
    await until(async () => ((await C.events.readCorrelation(TASK)).get(run.run_id)?.length ?? 0) === 5, 'the observer\'s log to hold the whole run')
    const log = (await C.events.readCorrelation(TASK)).get(run.run_id)!
    expect(log.map(e => e.seq)).toEqual([1, 2, 3, 4, 5])
    expect(log.at(-1)?.type).toBe('run.completed')
    expect((await C.events.lastEvent(run.run_id))?.seq).toBe(5)
  })
})
