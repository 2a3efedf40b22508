/**
 * Run slots among several delegators: each delegator holds at most its share
 * of an executor's concurrent runs (MAX_INBOUND_RUNS_PER_DELEGATOR, here
 * lowered), so one that delegates without end or leaves its runs blocked
 * cannot take them all; and expired idempotency records are deleted from the
 * executor's store instead of staying for good.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { IDEMPOTENCY_TTL_MS } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import type { RunContext } from '../src/runs/runtime.ts'
import { nextEvent, rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }

describe('run slots per delegator, and the idempotency sweep', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode

  const hold = async (ctx: RunContext): Promise<Record<string, unknown>> => {
    if (ctx.input.block === true) await ctx.block('waiting', 'cp-slots')
    if (ctx.input.hold === true) {
      await new Promise((_resolve, reject) => { ctx.signal.addEventListener('abort', () => { reject(ctx.signal.reason) }, { once: true }) })
    }
    return { ok: true }
  }

  beforeAll(async () => {
    nodes = await startMesh(3, {
      bootstrapOf: i => i - 1,
      nodeOptions: i => i === 2 ? { maxConcurrentInboundRuns: 4, maxInboundRunsPerDelegator: 2 } : {}
    })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    C.runs.handle(REVIEW, hold)
    await C.publishCard({ name: 'c-shared', capabilities: [REVIEW] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('a delegator past its share is refused while another still gets slots; the node\'s own limit comes first; an ended run gives its slot back', async () => {
    const a1 = await A.delegate({ to_agent: C.agentId, task_id: 'task-slots-a1', capability: REVIEW, input: { hold: true } })
    const blocked = nextEvent(C, e => e.type === 'run.blocked' && e.correlation_id === 'task-slots-a2')
    const a2 = await A.delegate({ to_agent: C.agentId, task_id: 'task-slots-a2', capability: REVIEW, input: { block: true } })
    await blocked
    expect(C.runs.slots.heldBy(A.agentId)).toBe(2)
    // A's share is full (a blocked run counts): refused, and nothing of the run was made
    const before = (await C.runs.list({ correlation_id: 'task-slots-a3' })).executing.length
    const err = await rejectsWith(A.delegate({ to_agent: C.agentId, task_id: 'task-slots-a3', capability: REVIEW, input: {} }), 'DELEGATION_REFUSED')
    expect(err.details).toMatchObject({ reason: 'capacity', limit: 2, scope: 'delegator' })
    expect((await C.runs.list({ correlation_id: 'task-slots-a3' })).executing.length).toBe(before)
    expect(C.runs.slots.refused.delegator).toBe(1)
    // B is not held back by A
    const b1 = await B.delegate({ to_agent: C.agentId, task_id: 'task-slots-b1', capability: REVIEW, input: { hold: true } })
    const b2 = await B.delegate({ to_agent: C.agentId, task_id: 'task-slots-b2', capability: REVIEW, input: { hold: true } })
    expect([b1.state, b2.state]).toEqual(['running', 'running'])
    expect(C.runs.slots.size).toBe(4)
    // the node is full now: that is the answer, whatever the delegator's share
    await B.cancel(b2.run_id)
    const b3 = await B.delegate({ to_agent: C.agentId, task_id: 'task-slots-b3', capability: REVIEW, input: { hold: true } })
    const full = await rejectsWith(A.delegate({ to_agent: C.agentId, task_id: 'task-slots-a4', capability: REVIEW, input: {} }), 'DELEGATION_REFUSED')
    expect(full.details).toMatchObject({ reason: 'capacity', limit: 4, scope: 'node' })
    expect(C.runs.slots.refused.node).toBe(1)
    // A's run ends: A has a slot again
    await A.cancel(a1.run_id)
    expect(C.runs.slots.heldBy(A.agentId)).toBe(1)
    const a5 = await A.delegate({ to_agent: C.agentId, task_id: 'task-slots-a5', capability: REVIEW, input: { hold: true } })
    expect(a5.state).toBe('running')
    for (const r of [a2, a5]) await A.cancel(r.run_id)
    for (const r of [b1, b3]) await B.cancel(r.run_id)
    expect(C.runs.slots.size).toBe(0)
    expect(C.runs.slots.heldBy(A.agentId)).toBe(0)
  })

  it('expired idempotency records are deleted from the store; live ones stay and still answer retries', async () => {
    // the sweep at start ran (on an empty store)
    await until(() => C.runs.idempotency.stats.sweeps >= 1, 'the sweep at start')
    const req = { to_agent: C.agentId, task_id: 'task-slots-idem', capability: REVIEW, input: {}, idempotency_key: 'key-slots' }
    const first = await A.delegate(req)
    const req2 = { ...req, task_id: 'task-slots-idem-2', idempotency_key: 'key-slots-2' }
    await B.delegate(req2)
    expect(await C.runs.store.idempotent(A.agentId, 'key-slots')).toBe(first.run_id)
    // a sweep now deletes nothing, and a retry is still answered with the first run
    expect(await C.runs.store.sweepIdempotency(Date.now())).toBe(0)
    expect((await A.delegate(req)).run_id).toBe(first.run_id)
    // a sweep as of a day later deletes both records (in batches of one here), and a second finds nothing left
    expect(await C.runs.store.sweepIdempotency(Date.now() + IDEMPOTENCY_TTL_MS + 1, 1)).toBe(2)
    expect(await C.runs.store.sweepIdempotency(Date.now() + IDEMPOTENCY_TTL_MS + 1)).toBe(0)
    expect(await C.runs.store.idempotent(A.agentId, 'key-slots')).toBeUndefined()
    // the key is free again: a new delegation with it creates a new run
    const again = await A.delegate(req)
    expect(again.run_id).not.toBe(first.run_id)
  })
})
