/**
 * A delegator keeps copies of its runs' events. Copies placed from gossip are
 * written together a moment later (one batch for a quick run instead of one
 * per event), but nothing that reads the log can tell: sync served from the
 * delegator, a new subscription's history and a replay all see every event
 * already handed to a subscriber.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { MemoryDatastore } from 'datastore-core'
import type { Batch } from 'interface-datastore'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { collect } from './events-helpers.ts'

const WORK = { capability_id: 'cap:follow-copies', version: '1.0.0' }

/** A real memory datastore that counts batches written. */
class CountingDatastore extends MemoryDatastore {
  batches = 0
  override batch (): Batch {
    this.batches++
    return super.batch()
  }
}

describe('copies of a followed run', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const store = new CountingDatastore()

  beforeAll(async () => {
    nodes = await startMesh(3, { nodeOptions: (i) => i === 0 ? { datastore: store } : {} })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      await ctx.progress({ step: 1 })
      return { done: ctx.run.correlation_id }
    })
    await B.publishCard({ name: 'worker-b', capabilities: [WORK] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('are served, replayed and handed to new subscribers as soon as they are delivered', async () => {
    const task = 'task-copies-1'
    // a local subscriber on the delegator sees each event when it is placed, before it is written
    const seen = await collect(A, task)
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    await seen.until(es => es.some(e => e.type === 'run.completed'), 'the delegator to place run.completed')
    // at once: another node syncing from the delegator gets all three
    const fetched = await C.events.fetchCorrelation(task, { from: A.agentId })
    expect(fetched.map(e => e.seq)).toEqual([1, 2, 3])
    // a new subscription's history and a replay hold them too
    const late = await collect(A, task)
    expect(late.events.map(e => e.seq)).toEqual([1, 2, 3])
    late.sub.close()
    const replay = await A.events.replay(task, { timeoutMs: 2_000 })
    expect(replay.events.map(e => `${e.run_id}#${e.seq}`)).toEqual([1, 2, 3].map(s => `${run.run_id}#${s}`))
    seen.sub.close()
    await until(async () => (await A.runs.list({ correlation_id: task })).delegated[0]?.state === 'completed', 'the outgoing record to show the completion')
  })

  it('are written in fewer batches than events for runs delegated back to back', async () => {
    const before = store.batches
    const runs = 10
    for (let i = 0; i < runs; i++) {
      const task = `task-copies-batch-${i}`
      await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    }
    await until(async () => {
      const { delegated } = await A.runs.list()
      return delegated.filter(r => r.correlation_id.startsWith('task-copies-batch-') && r.state === 'completed').length === runs
    }, 'every run to be recorded as completed')
    for (let i = 0; i < runs; i++) {
      const held = await A.events.readCorrelation(`task-copies-batch-${i}`)
      expect([...held.values()][0]?.map(e => e.type)).toEqual(['run.started', 'run.progress', 'run.completed'])
    }
    // 30 copies, 10 handles and 10 completions: one batch each would be 50
    expect(store.batches - before).toBeLessThan(50)
  })
})
