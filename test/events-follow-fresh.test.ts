/**
 * Following a delegated run: a handle the executor has just created has no
 * log here, so its gossip copies are placed without a log lookup; a handle
 * returned again for an idempotency key may name a run the log holds, so that
 * one is not taken as new. And a subscription whose signal aborts while it is being
 * set up leaves the topic behind it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { MemoryDatastore } from 'datastore-core'
import type { Key } from 'interface-datastore'
import type { MeshNode } from '../src/node.ts'
import { nextEvent, startMesh, stopAll, until } from './helpers.ts'
import { collect } from './events-helpers.ts'

const WORK = { capability_id: 'cap:follow-fresh', version: '1.0.0' }

/** A real memory datastore that counts existence checks of event-log keys (the head lookups). */
class CountingDatastore extends MemoryDatastore {
  logChecks = 0
  override async has (key: Key): Promise<boolean> {
    if (key.toString().startsWith('/aap/log/')) this.logChecks++
    return super.has(key)
  }
}

describe('following a delegated run', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  const store = new CountingDatastore()

  beforeAll(async () => {
    nodes = await startMesh(2, { nodeOptions: (i) => i === 0 ? { datastore: store } : {} })
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => ({ done: ctx.run.correlation_id }))
    await B.publishCard({ name: 'worker-b', capabilities: [WORK] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('places the events of a run it just started without looking up the log', async () => {
    const task = 'task-fresh-1'
    const completed = nextEvent(B, e => e.correlation_id === task && e.type === 'run.completed')
    const before = store.logChecks
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    await completed
    await until(async () => (await A.runs.list({ correlation_id: task })).delegated[0]?.state === 'completed', 'the outgoing record to show the completion')
    const held = await A.events.readCorrelation(task)
    expect(held.get(run.run_id)?.map(e => e.type)).toEqual(['run.started', 'run.completed'])
    // gossip brought both events, and neither waited for a head lookup
    expect(A.events.stats.gossip.accepted).toBeGreaterThanOrEqual(2)
    expect(store.logChecks - before).toBe(0)
    await until(() => !A.events.topics().includes(task), 'the delegator to leave the topic')
  })

  it('an idempotency key that returns an earlier run: the run is not taken as new, each event is held and delivered once', async () => {
    const task = 'task-fresh-idem'
    const req = { to_agent: B.agentId, task_id: task, capability: WORK, input: {}, idempotency_key: 'idem-1' }
    const completed = nextEvent(B, e => e.correlation_id === task && e.type === 'run.completed')
    const first = await A.delegate(req)
    await completed
    await until(async () => (await A.events.readCorrelation(task)).get(first.run_id)?.length === 2, 'the delegator to hold both events')
    await until(() => !A.events.topics().includes(task), 'the delegator to leave the topic')
    const again = await A.delegate(req)
    expect(again.run_id).toBe(first.run_id)
    const c = await collect(A, task, { participants: [B.agentId] })
    await c.until(es => es.length >= 2, 'both events')
    expect(c.events.map(e => e.seq)).toEqual([1, 2])
    c.sub.close()
    const held = await A.events.readCorrelation(task)
    expect(held.get(first.run_id)?.map(e => e.seq)).toEqual([1, 2])
  })

  it('leaves the topic when a subscription is aborted while it is being set up', async () => {
    const task = 'task-fresh-1'
    // A holds this correlation's events (first test), so subscribe hands them over as history,
    // and the consumer aborts on the first one: before subscribe has returned
    const ac = new AbortController()
    const sub = await A.events.subscribe(task, { signal: ac.signal, onEvent: () => { ac.abort() } })
    expect(ac.signal.aborted).toBe(true)
    expect(sub.closed).toBe(true)
    expect(A.events.topics()).not.toContain(task)
  })
})
