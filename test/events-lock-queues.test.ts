/**
 * What queues on a correlation's lock besides gossip stays bounded while the
 * lock is held (a stalled disk, a flood of one task's gossip), and nothing is
 * lost once it is free (lock-queues.ts, local-events.ts). Before, gossip alone
 * was bounded (EVENTS_LOCK_WAITING_MAX): each event of this node's own runs
 * queued a task of its own, each sync page waited there holding a sync slot
 * (an agent's share of slots taken by one task's syncs, so its other tasks
 * did not sync), and each subscription and catch-up pull queued too.
 *
 * The lock is held the way a stalled write holds it: a task on it that does
 * not end, with EVENTS_LOCK_WAITING_MAX tasks behind it (the gossip bound).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent, Run } from '../src/runlog/types.ts'
import { EVENTS_LOCK_WAITING_MAX } from '../src/events/constants.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'
import { collect, type Collector } from './events-helpers.ts'
import { corrTrack, holdLock } from './fixtures/held-lock.ts'

const WORK = { capability_id: 'cap:lock-queues', version: '1.0.0' }
const EVENTS = 200

function seqs (events: AgentEvent[], runId: string): number[] {
  return events.filter(e => e.run_id === runId).map(e => e.seq)
}

function upTo (n: number): number[] {
  return Array.from({ length: n }, (_, i) => i + 1)
}

describe('the executor\'s own events and its readers while its lock is held', () => {
  const TASK = 'task-lock-queues-local'
  // run.started, EVENTS, run.completed
  const TOTAL = EVENTS + 2
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let onB: Collector
  let run: Run
  const go = Promise.withResolvers<void>()

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      await go.promise
      for (let i = 0; i < EVENTS; i++) await ctx.progress({ step: i })
      return { done: true }
    })
    await B.publishCard({ name: 'worker-b', capabilities: [WORK] })
    // the executor follows the task itself: its own events go to its subscriber through the lock
    onB = await collect(B, TASK, { owner: A.agentId, participants: [A.agentId] })
  }, 60_000)
  afterAll(async () => { await stopAll(nodes) })

  it('queues none of them past the bound, and hands every one to the subscriber once the lock is free', async () => {
    run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    await onB.until(es => es.some(e => e.run_id === run.run_id && e.seq === 1), 'run.started at the executor\'s subscriber')
    const t = corrTrack(B, TASK)
    const release = await holdLock(t)
    const before = B.events.stats.lockRefused?.local ?? 0

    go.resolve()
    let most = 0
    await until(async () => {
      most = Math.max(most, t.lock.waiting)
      return (await B.events.lastEvent(run.run_id))?.type === 'run.completed'
    }, 'the run to end on the executor', 60_000)
    most = Math.max(most, t.lock.waiting)
    // one task reads them back from the log when its turn comes; before, one task per event waited
    expect(most).toBeLessThanOrEqual(EVENTS_LOCK_WAITING_MAX + 1)
    expect(B.events.stats.lockRefused.local - before).toBeGreaterThan(0)
    expect(seqs(onB.events, run.run_id)).toEqual([1])

    await release()
    await onB.until(es => seqs(es, run.run_id).length >= TOTAL, 'the whole run at the executor\'s subscriber', 60_000)
    expect(seqs(onB.events, run.run_id)).toEqual(upTo(TOTAL))
    await until(() => t.lock.busy === 0, 'the lock to drain')
  }, 120_000)

  it('refuses a new subscription with a typed error once it has waited its bound, and lets a catch-up pull wait aside, then reads it all', async () => {
    await until(async () => (await B.events.lastEvent(run.run_id))?.seq === TOTAL, 'the run in the executor\'s log')
    // an iterator reads its history at its own pace (catch-up.ts), one pull on the lock per page
    const reader = await B.events.subscribe(TASK, { owner: A.agentId, maxBuffered: 16 })
    const t = corrTrack(B, TASK)
    const release = await holdLock(t)
    const refusedBefore = B.events.stats.lockRefused?.subscribe ?? 0
    const pullsBefore = B.events.stats.lockRefused?.pull ?? 0

    const err = await rejectsWith(B.events.subscribe(TASK, { owner: A.agentId, onEvent: () => {} }), 'TIMEOUT')
    expect(err.details?.reason).toBe('correlation_busy')
    expect(B.events.stats.lockRefused.subscribe - refusedBefore).toBe(1)

    const first = reader.next()
    await until(() => B.events.stats.lockRefused.pull > pullsBefore, 'the pull to wait for the lock')
    // it waits aside: nothing more queued on the lock
    expect(t.lock.waiting).toBeLessThanOrEqual(EVENTS_LOCK_WAITING_MAX)

    await release()
    const got: AgentEvent[] = [(await first).value as AgentEvent]
    while (seqs(got, run.run_id).length < TOTAL) {
      const n = await reader.next()
      if (n.done === true) throw new Error('the reader ended early')
      got.push(n.value)
    }
    expect(seqs(got, run.run_id)).toEqual(upTo(TOTAL))
    reader.close()
    // and a subscription is taken again once the lock is free
    const again = await collect(B, TASK, { owner: A.agentId })
    await again.until(es => seqs(es, run.run_id).length === TOTAL, 'the whole run at a new subscriber')
    again.sub.close()
  }, 120_000)
})

describe('syncs into a task whose lock is held', () => {
  const TASK = 'task-lock-queues-sync'
  const OTHER = 'task-lock-queues-other'
  const STEPS = 3
  // run.started, STEPS, run.completed
  const TOTAL = STEPS + 2
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      for (let i = 0; i < STEPS; i++) await ctx.progress({ step: i })
      return { done: true }
    })
    await B.publishCard({ name: 'worker-b', capabilities: [WORK] })
  }, 60_000)
  afterAll(async () => { await stopAll(nodes) })

  it('gives the sync slots back instead of waiting there, and places every run once the lock is free', async () => {
    const runs: Run[] = []
    for (let i = 0; i < 2; i++) runs.push(await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} }))
    const other = await A.delegate({ to_agent: B.agentId, task_id: OTHER, capability: WORK, input: {} })
    for (const r of [...runs, other]) await until(async () => (await B.events.lastEvent(r.run_id))?.seq === TOTAL, 'the runs to end')

    // the observer follows the task knowing nobody yet (no sync), and its lock is held
    const onC = await collect(C, TASK, { participants: [] })
    const t = corrTrack(C, TASK)
    const release = await holdLock(t)
    const before = C.events.stats.lockRefused?.sync ?? 0

    // told of the runs, it syncs the task from their delegator and executor and fetches each run: every page is
    // refused, and the sync gives its slot back
    for (const r of runs) C.events.follow(r)
    await until(() => (C.events.stats.lockRefused?.sync ?? 0) - before >= runs.length, 'the syncs\' pages to be refused')
    expect(t.lock.waiting).toBeLessThanOrEqual(EVENTS_LOCK_WAITING_MAX)
    // the executor's share of slots is free: another task still syncs from it (before, it waited for the lock)
    expect((await C.events.fetchRun(other.run_id)).map(e => e.seq)).toEqual(upTo(TOTAL))
    // a caller asking for a run of the held task is told so
    const err = await rejectsWith(C.events.fetchRun(runs[0]!.run_id), 'TIMEOUT')
    expect(err.details?.reason).toBe('correlation_busy')
    expect(onC.events).toEqual([])

    // the lock is free: the refused syncs are made again, and every run is placed, delivered and stored in order
    await release()
    await onC.until(es => runs.every(r => seqs(es, r.run_id).length === TOTAL), 'every run at the observer', 60_000)
    for (const r of runs) {
      expect(seqs(onC.events, r.run_id)).toEqual(upTo(TOTAL))
      expect((await C.events.lastEvent(r.run_id))?.seq).toBe(TOTAL)
    }
    onC.sub.close()
  }, 120_000)
})
