/**
 * A delegation under a parent run that never shows up (a made-up parent id: the delegator may name any run
 * of its own) left the executor's correlation tracked for good once its run had ended: the run's interest was
 * copied to the parent it waited for, which stayed 'unknown'. One correlation per such delegation, with the
 * run's start and input held. A run of the node's own no longer lends its interest to its ancestor.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { newRunId } from '../src/runlog/event.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:evsub-ancestor', version: '1.0.0' }

describe('a delegation under a parent run that never shows up', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async () => ({ ok: true }))
    await B.publishCard({ name: 'evsub-ancestor', capabilities: [CAP] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('lets the executor\'s correlation go once its run ended', async () => {
    const tracked = (id: string): unknown => (B.events as unknown as { correlations: { get: (id: string) => unknown } }).correlations.get(id)
    const tasks: string[] = []
    for (let i = 0; i < 5; i++) {
      const task = `task-evsub-ancestor-${i}`
      tasks.push(task)
      const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: CAP, input: {}, parent_run: newRunId(A.agentId) }, { follow: false })
      await until(async () => (await B.events.lastEvent(run.run_id))?.type === 'run.completed', 'the run to end')
    }
    for (const t of tasks) await until(() => tracked(t) === undefined, `${t} to be let go`, 15_000)
    expect(tasks.filter(t => tracked(t) !== undefined)).toEqual([])
  }, 60_000)
})
