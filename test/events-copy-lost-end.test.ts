/**
 * A failed write of the copies that held a run's last events must not leave
 * the observer's log short for good (src/events/copies.ts). Here the batch
 * holding a run's completion fails. Nothing comes after it by gossip (the run
 * has ended), so a repair made only when the run is next used never came: the
 * log held seqs 1 and 2, every read of it (history, replay, the sync served to
 * others) lacked the completion, and the delegator's own record of the run
 * stayed `running`. The copies are now fetched again as soon as a write fails.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { MemoryDatastore } from 'datastore-core'
import type { Batch, Key } from 'interface-datastore'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { collect, type Collector } from './events-helpers.ts'

const WORK = { capability_id: 'cap:copy-lost-end', version: '1.0.0' }

/** A memory datastore whose first batch holding a seq-3 event fails; `wroteSeq2` resolves once seq 2 is in. */
class FailingSeq3Store extends MemoryDatastore {
  readonly wroteSeq2 = Promise.withResolvers<void>()
  failures = 0
  override batch (): Batch {
    const inner = super.batch()
    const keys: string[] = []
    return {
      put: (key: Key, value: Uint8Array) => { keys.push(key.toString()); inner.put(key, value) },
      delete: (key: Key) => { inner.delete(key) },
      commit: async () => {
        if (this.failures === 0 && keys.some(k => k.startsWith('/aap/log/') && k.endsWith('/0000000003'))) {
          this.failures++
          throw new Error('disk write failed (test)')
        }
        await inner.commit()
        if (keys.some(k => k.startsWith('/aap/log/') && k.endsWith('/0000000002'))) this.wroteSeq2.resolve()
      }
    }
  }
}

describe('a failed write of a run\'s last copies', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const observerStore = new FailingSeq3Store()
  const delegatorStore = new FailingSeq3Store()
  let onC: Collector

  beforeAll(async () => {
    nodes = await startMesh(3, { nodeOptions: (i) => i === 0 ? { datastore: delegatorStore } : i === 2 ? { datastore: observerStore } : {} })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      await ctx.progress({ step: 1 })
      // the completion (seq 3) in a batch of its own, after seq 2 is in both logs
      await Promise.all([observerStore.wroteSeq2.promise, delegatorStore.wroteSeq2.promise])
      return { done: true }
    })
    await B.publishCard({ name: 'worker-b', capabilities: [WORK] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('is fetched again: the logs hold the whole run and the delegator\'s record ends', async () => {
    const task = 'task-copy-lost-end'
    onC = await collect(C, task, { owner: A.agentId, participants: [B.agentId] })
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    await onC.until(es => es.some(e => e.run_id === run.run_id && e.type === 'run.completed'), 'the completion placed at the observer')
    await until(() => C.events.stats.copyWriteErrors >= 1 && A.events.stats.copyWriteErrors >= 1, 'both failed writes')
    for (const node of [C, A]) {
      await until(async () => ((await node.events.readCorrelation(task)).get(run.run_id)?.length ?? 0) === 3, 'the log to hold the whole run')
      const log = (await node.events.readCorrelation(task)).get(run.run_id)!
      expect(log.map(e => e.seq)).toEqual([1, 2, 3])
      expect(log.at(-1)?.type).toBe('run.completed')
    }
    await until(async () => (await A.runs.list({ correlation_id: task })).delegated[0]?.state === 'completed', 'the delegator\'s record to end')
    expect((await A.runs.list({ correlation_id: task })).delegated.map(r => r.run_id)).toEqual([run.run_id])
  })
})
