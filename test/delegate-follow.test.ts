/**
 * MeshNode.delegate follows the run it starts (topic joined, events kept,
 * outgoing record kept fresh) unless told not to, per node or per call.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { namedGates, nextEvent, startMesh, stopAll, until } from './helpers.ts'
import { collect } from './events-helpers.ts'

const WORK = { capability_id: 'cap:follow-test', version: '1.0.0' }

describe('delegate: following the run or not', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, Q: MeshNode
  /** Runs on B wait here until the test lets them complete. */
  const gates = namedGates()
  const gate = gates.get

  beforeAll(async () => {
    nodes = await startMesh(3, { nodeOptions: (i) => i === 2 ? { followDelegations: false } : {} })
    ;[A, B, Q] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      await gate(ctx.run.correlation_id).promise
      return { done: ctx.run.correlation_id }
    })
    await B.publishCard({ name: 'worker-b', capabilities: [WORK] })
  })
  afterAll(async () => {
    gates.openAll()
    await stopAll(nodes)
  })

  const completed = async (node: MeshNode, runId: string): Promise<AgentEvent> =>
    nextEvent(node, e => e.run_id === runId && e.type === 'run.completed')

  it('follows by default: the delegator joins the topic, keeps the events and sees the run complete', async () => {
    const task = 'task-follow-default'
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    expect(A.events.topics()).toContain(task)
    const done = completed(B, run.run_id)
    gate(task).resolve()
    await done
    await until(async () => (await A.runs.list({ correlation_id: task })).delegated[0]?.state === 'completed', 'the outgoing record to show the completion')
    const held = await A.events.readCorrelation(task)
    expect(held.get(run.run_id)?.map(e => e.type)).toEqual(['run.started', 'run.completed'])
    // nothing live is left to follow: the topic is left
    await until(() => !A.events.topics().includes(task), 'the delegator to leave the topic')
  })

  it('follow: false returns the same durable handle without joining the topic or tracking the run', async () => {
    const task = 'task-follow-off'
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: { n: 1 } }, { follow: false })
    expect(run.state).toBe('running')
    expect(run.correlation_id).toBe(task)
    expect(A.events.topics()).not.toContain(task)
    expect(A.events.participants(task)).toEqual([])
    // the delegator still records the run it started
    const listed = await A.runs.list({ correlation_id: task })
    expect(listed.delegated.map(r => r.run_id)).toEqual([run.run_id])
    // the executor holds it durably
    expect((await B.runs.store.get(run.run_id))?.state).toBe('running')

    const done = completed(B, run.run_id)
    gate(task).resolve()
    await done
    // the delegator did not follow, so it holds no events of the run ...
    expect((await A.events.readCorrelation(task)).size).toBe(0)
    // ... until it asks: a subscription finds them on demand, and getRun refreshes the record
    const sub = await collect(A, task, { runs: [run.run_id] })
    const events = await sub.until(es => es.some(e => e.type === 'run.completed'), 'the completion by sync')
    expect(events.map(e => e.type)).toEqual(['run.started', 'run.completed'])
    sub.sub.close()
    expect((await A.getRun(run.run_id)).state).toBe('completed')
    expect((await A.runs.list({ correlation_id: task })).delegated[0]?.state).toBe('completed')
  })

  it('followDelegations: false is the node default, and a call can still ask to follow', async () => {
    const off = 'task-follow-node-off'
    const r1 = await Q.delegate({ to_agent: B.agentId, task_id: off, capability: WORK, input: {} })
    expect(r1.state).toBe('running')
    expect(Q.events.topics()).not.toContain(off)

    const on = 'task-follow-node-on'
    const r2 = await Q.delegate({ to_agent: B.agentId, task_id: on, capability: WORK, input: {} }, { follow: true })
    expect(Q.events.topics()).toContain(on)
    const done = completed(B, r2.run_id)
    gate(on).resolve()
    await done
    await until(async () => (await Q.events.readCorrelation(on)).get(r2.run_id)?.length === 2, 'the followed run\'s events at the delegator')
    gate(off).resolve()
  })
})
