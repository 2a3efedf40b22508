/**
 * A node delegating a root run owns that task from the moment it prepares
 * the delegation (protocols/lineage.md): the run.started of another agent's
 * root run under the same task id, arriving by gossip while the delegation is
 * still on its way, is of a foreign task and cannot make the task that
 * agent's. It used to: the first root admitted named the owner, and the
 * node's own run was then judged foreign everywhere on this node.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const SLOW = { capability_id: 'cap:slow-to-accept', version: '1.0.0' }
const QUICK = { capability_id: 'cap:quick', version: '1.0.0' }
const TASK = 'task-owned-from-the-start'

describe('the owner of a task being delegated', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode, H: MeshNode
  const gate = Promise.withResolvers<void>()
  let asked = false

  beforeAll(async () => {
    nodes = await startMesh(4)
    ;[A, B, C, H] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    B.runs.handle(SLOW, async () => ({ ok: 'b' }))
    C.runs.handle(QUICK, async () => ({ ok: 'c' }))
    await B.publishCard({ name: 'slow', capabilities: [SLOW] })
    await C.publishCard({ name: 'quick', capabilities: [QUICK] })
    // B takes its time to accept: the window in which A has joined the task's topic and holds no handle yet
    B.runs.setPolicy(async () => {
      asked = true
      await gate.promise
      return undefined
    })
    for (const n of [B, C, H]) await A.host.dial(n.host.peerId)
  })
  afterAll(async () => {
    gate.resolve()
    await stopAll(nodes)
  })

  it('a root run of another agent under the task id, seen while the delegation waits, is foreign; the node\'s own run is followed', async () => {
    const mine = A.delegate({ to_agent: B.agentId, task_id: TASK, capability: SLOW, input: {} })
    mine.catch(() => {}) // awaited below; a failure before that is the test's own
    await until(() => asked, 'B to be asked')
    const before = { ...A.events.stats.gossip }
    // H starts a task of its own under the same id, with C: C publishes its run.started to the topic A joined
    const theirs = await H.delegate({ to_agent: C.agentId, task_id: TASK, capability: QUICK, input: {} }, { follow: false })
    await until(() => A.events.stats.gossip.foreign_owner + A.events.stats.gossip.accepted > before.foreign_owner + before.accepted, 'C\'s run.started to reach A')
    expect(A.events.stats.gossip.foreign_owner).toBeGreaterThan(before.foreign_owner)
    gate.resolve()
    const run = await mine
    // the task is A's: a subscriber as its owner gets A's run, and none of H's
    const sub = await A.events.subscribe(TASK, { owner: A.agentId })
    try {
      await until(async () => (await A.events.lastEvent(run.run_id))?.type === 'run.completed', 'A\'s run to end at A')
      const runs = new Set<string>()
      const done = Promise.withResolvers<void>()
      const seen = await A.events.subscribe(TASK, { owner: A.agentId, onEvent: (e) => { runs.add(e.run_id); if (e.run_id === run.run_id && e.type === 'run.completed') done.resolve() } })
      await done.promise
      seen.close()
      expect(runs.has(run.run_id)).toBe(true)
      expect(runs.has(theirs.run_id)).toBe(false)
    } finally {
      sub.close()
    }
  })

  it('a root delegation that fails takes its claim on the task back', async () => {
    // a subscriber that names no owner keeps the task followed meanwhile
    const watcher = await A.events.subscribe('task-failed-claim')
    try {
      await expect(A.delegate({ to_agent: C.agentId, task_id: 'task-failed-claim', capability: SLOW, input: {} })).rejects.toMatchObject({ code: 'CAPABILITY_NOT_SUPPORTED' })
      // the task is nobody's here yet: a subscriber may name another owner
      const other = await A.events.subscribe('task-failed-claim', { owner: H.agentId })
      other.close()
    } finally {
      watcher.close()
    }
  })
})
