/**
 * Work item ids keep growing across a restart of the bridge: an agent that
 * reconnects with the Last-Event-ID it saw before the restart is handed the
 * items made since, never skips them. Ids start from the clock, in
 * WORK_ITEM_IDS_PER_MS per millisecond, so a bridge started a millisecond
 * after one that handed out a few items still starts above them.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { WorkBridge, type WorkItem } from '../src/api/bridge.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:ids', version: '1.0.0' }

/** A bridge started when the clock reads `at` (only its start reads the clock). */
function bridgeStartedAt (node: MeshNode, at: number): WorkBridge {
  vi.useFakeTimers({ toFake: ['Date'] })
  try {
    vi.setSystemTime(at)
    return new WorkBridge(node, silentLogger())
  } finally {
    vi.useRealTimers()
  }
}

describe('work item ids across a restart of the bridge', () => {
  let nodes: MeshNode[] = []

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    await nodes[1]!.publishCard({ name: 'sidecar', capabilities: [CAP] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('a bridge started a millisecond after one that handed out items gives ids above them, and a Last-Event-ID from before gets the new work', async () => {
    const [caller, worker] = nodes as [MeshNode, MeshNode]
    const t0 = Date.now()
    const before = bridgeStartedAt(worker, t0)
    before.serve([CAP])
    const seen: WorkItem[] = []
    before.attach((item) => { seen.push(item) })
    for (let i = 0; i < 3; i++) await caller.delegate({ to_agent: worker.agentId, task_id: `ids-before-${i}`, capability: CAP, input: {} })
    await until(() => seen.filter(i => i.type === 'work').length === 3, 'three work items')
    const last = Math.max(...seen.map(i => i.id))
    before.stop()

    // the restart: a new bridge, one millisecond later by the clock
    const after = bridgeStartedAt(worker, t0 + 1)
    after.serve([CAP])
    const run = await caller.delegate({ to_agent: worker.agentId, task_id: 'ids-after', capability: CAP, input: {} })
    // the agent reconnects with the last id it saw before the restart
    const missed: WorkItem[] = []
    await until(() => {
      missed.length = 0
      const detach = after.attach((item) => { missed.push(item) }, last)
      detach()
      return missed.some(i => i.type === 'work' && i.run.run_id === run.run_id)
    }, 'the new work item past the old Last-Event-ID', 5_000)
    expect(missed.every(i => i.id > last)).toBe(true)
    after.stop()
  })
})
