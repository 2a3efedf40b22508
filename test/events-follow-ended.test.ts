/**
 * A node that follows a run it delegated whose log here has ended already
 * (what `start` does with a delegator's record left saying `running` by a
 * crash between the copy and the record) lets the correlation go once the
 * fetch finds nothing newer: the topic was kept joined for good before, and
 * counted against MAX_CORRELATION_TOPICS.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:follow-ended', version: '1.0.0' }
const TASK = 'task-follow-ended'

describe('following a run that has ended already', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(WORK, async () => ({ done: true }))
    await B.publishCard({ name: 'worker-b', capabilities: [WORK] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('leaves the topic once the fetch brings nothing newer', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    await until(async () => (await A.events.lastEvent(run.run_id))?.type === 'run.completed', 'the completion in the delegator\'s log')
    await until(() => !A.events.topics().includes(TASK), 'the delegator to leave the topic after the run ended')
    const fetched = A.events.stats.syncRequests.run
    A.events.follow({ ...run, state: 'running' })
    expect(A.events.topics()).toContain(TASK)
    await until(() => A.events.stats.syncRequests.run > fetched, 'the fetch of the run')
    await until(() => !A.events.topics().includes(TASK), 'the topic to be left again')
  })
})
