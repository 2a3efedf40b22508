/**
 * Run slots among several delegators: each delegator holds at most its share
 * of an executor's concurrent runs (MAX_INBOUND_RUNS_PER_DELEGATOR, here
 * lowered), so one that delegates without end or leaves its runs blocked
 * cannot take them all; and expired idempotency records are deleted from the
 * executor's store instead of staying for good.
 */
import { MemoryDatastore } from 'datastore-core'
import { Key } from 'interface-datastore'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { IDEMPOTENCY_TTL_MS, MAX_CONCURRENT_INBOUND_RUNS } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { MAX_INBOUND_RUNS_PER_DELEGATOR } from '../src/runs/constants.ts'
import { delegatorShare, RunSlots } from '../src/runs/slots.ts'
import { RunStore } from '../src/runs/store.ts'
import { holdingHandler, nextEvent, rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }

describe('run slots per delegator, and the idempotency sweep', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode

  const hold = holdingHandler('cp-slots')

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

describe('run slots and the idempotency sweep, one part at a time', () => {
  it('a slot is charged to whom asked for it, per run: given back once, never twice, and a live run id cannot take a second', () => {
    const slots = new RunSlots(3, 2)
    slots.take('D', 'r1')
    // a handoff is charged to its sender, not to the run's delegator
    slots.take('sender', 'r2')
    expect([slots.heldBy('D'), slots.heldBy('sender'), slots.size]).toEqual([1, 1, 2])
    expect(() => { slots.take('D', 'r1') }).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST', details: expect.objectContaining({ reason: 'run_id_taken' }) }))
    expect(slots.size).toBe(2)
    slots.release('r1')
    slots.release('r1')
    slots.release('never-held')
    expect([slots.heldBy('D'), slots.size]).toEqual([0, 1])
    // after a restart a live run holds its slot again, past the limits if need be
    slots.restore('D', 'r3')
    slots.restore('D', 'r4')
    slots.restore('D', 'r5')
    expect(slots.size).toBe(4)
    expect(() => { slots.take('E', 'r6') }).toThrow(expect.objectContaining({ code: 'DELEGATION_REFUSED' }))
  })

  it('a delegator\'s share follows the node\'s limit unless it is set: a quarter, rounded up, at most MAX_INBOUND_RUNS_PER_DELEGATOR', () => {
    expect(delegatorShare(MAX_CONCURRENT_INBOUND_RUNS)).toBe(MAX_INBOUND_RUNS_PER_DELEGATOR)
    expect(delegatorShare(1024)).toBe(MAX_INBOUND_RUNS_PER_DELEGATOR)
    expect([16, 10, 2, 1].map(max => delegatorShare(max))).toEqual([4, 3, 1, 1])
    // a share that is set is kept, at most the node's limit
    expect([delegatorShare(16, 16), delegatorShare(16, 40), delegatorShare(1024, 100)]).toEqual([16, 16, 100])
    // a node that lowered its limit to 16: one delegator's fifth run is refused, another delegator is still served
    const slots = new RunSlots(16)
    for (let i = 0; i < 4; i++) slots.take('D', `d${i}`)
    expect(() => { slots.take('D', 'd4') }).toThrow(expect.objectContaining({ code: 'DELEGATION_REFUSED', details: expect.objectContaining({ reason: 'capacity', limit: 4, scope: 'delegator' }) }))
    slots.take('E', 'e0')
    expect([slots.size, slots.heldBy('D'), slots.refused.delegator]).toEqual([5, 4, 1])
  })

  it('a record written anew while a sweep runs is not deleted by it', async () => {
    const ds = new MemoryDatastore()
    const store = new RunStore(ds)
    const record = (at: number): Uint8Array => new TextEncoder().encode(JSON.stringify({ run_id: `run-${at}`, at }))
    for (const k of ['K1', 'K2', 'K3']) await ds.put(new Key(`/aap/idem/A/${k}`), record(1))
    let sweeping: Promise<number> | undefined
    await store.withIdempotencyKey('A', 'K2', async () => {
      // the sweep reads K2 as expired, then waits for its key to delete it
      sweeping = store.sweepIdempotency(Date.now(), 1)
      for (let i = 0; i < 10; i++) await new Promise(resolve => setImmediate(resolve))
      // meanwhile a delegation reuses the key: a fresh record
      await ds.put(new Key('/aap/idem/A/K2'), record(Date.now()))
    })
    expect(await sweeping).toBe(2)
    expect(await store.idempotent('A', 'K2')).toMatch(/^run-/)
    expect(await ds.has(new Key('/aap/idem/A/K1'))).toBe(false)
    expect(await ds.has(new Key('/aap/idem/A/K3'))).toBe(false)
  })
})
