/**
 * An observer whose disk stalls while a sync answer's copies are written
 * holds its correlation's lock for as long as the stall lasts (the write is
 * awaited on the lock). Every gossiped event of the correlation then queued
 * on that lock, without a bound, each with its event in memory: an executor
 * publishing at gossip speed grew it with every event (session 49's review).
 * Past EVENTS_LOCK_WAITING_MAX waiting, a gossiped event is now ignored and
 * its run fetched once the lock drains: the subscriber still gets every event,
 * and the log holds the whole run once the disk is back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { StallingStore } from './fixtures/stalling-datastore.ts'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { EVENTS_LOCK_WAITING_MAX } from '../src/events/constants.ts'
import type { EventSubscription } from '../src/events/subscription.ts'
import { correlationTopic } from '../src/events/topic.ts'
import type { CorrTrack } from '../src/events/track.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { collect, type Collector } from './events-helpers.ts'

const WORK = { capability_id: 'cap:lock-waiting', version: '1.0.0' }
const TASK = 'task-lock-waiting'
// events before the observer follows (its sync answer), and after (gossip while the answer's write hangs)
const BEFORE = 3
const EVENTS = EVENTS_LOCK_WAITING_MAX + 100
// run.started, BEFORE, EVENTS, run.completed
const TOTAL = BEFORE + EVENTS + 2

describe('an observer whose disk stalls while a sync answer is written', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const store = new StallingStore()
  let onA: Collector
  const go = Promise.withResolvers<void>()

  beforeAll(async () => {
    nodes = await startMesh(3, { nodeOptions: (i) => i === 2 ? { datastore: store } : {} })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      for (let i = 0; i < BEFORE; i++) await ctx.progress({ step: i })
      await go.promise
      for (let i = 0; i < EVENTS; i++) await ctx.progress({ step: BEFORE + i })
      return { done: true }
    })
    await B.publishCard({ name: 'worker-b', capabilities: [WORK] })
    onA = await collect(A, TASK, { owner: A.agentId, participants: [B.agentId] })
  }, 60_000)
  afterAll(async () => {
    store.resume()
    await stopAll(nodes)
  })

  it('queues at most EVENTS_LOCK_WAITING_MAX gossiped events on the held lock, and still delivers and stores the whole run', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    await onA.until(es => es.some(e => e.run_id === run.run_id && e.seq === BEFORE + 1), 'the first events at the owner')

    // the observer's disk stalls, then it follows the task: the sync answer's copies are written on the
    // correlation's lock, and that write does not return while the disk is stalled
    store.stall()
    const got: AgentEvent[] = []
    let sub: EventSubscription | undefined
    // not awaited now: a subscription waits (within its sync timeout) for its first syncs, held by the stall
    const subscribed = C.events.subscribe(TASK, {
      owner: A.agentId,
      participants: [B.agentId],
      runs: [run.run_id],
      onEvent: (e) => { got.push(e) }
    }).then((s) => { sub = s })
    await until(() => got.some(e => e.run_id === run.run_id && e.seq === BEFORE + 1), 'the sync answer delivered at the observer')
    const t = (C.events as unknown as { correlations: { get: (id: string) => CorrTrack | undefined } }).correlations.get(TASK)
    if (t === undefined) throw new Error('the observer does not track the task')
    // the answer was placed (delivered) and its write holds the lock
    expect(t.lock.busy).toBeGreaterThan(0)

    // the executor publishes the rest once it sees the observer on the topic (so gossip brings it there)
    const topic = correlationTopic(TASK)
    await until(() => B.host.services.pubsub.getSubscribers(topic).some(p => p.toString() === C.agentId), 'the executor seeing the observer on the topic')
    const gapsBefore = C.events.stats.gossip.gap
    go.resolve()
    await onA.until(es => es.some(e => e.run_id === run.run_id && e.type === 'run.completed'), 'the completion at the owner', 60_000)
    // every event published meanwhile has come to the observer's validator: queued on the lock, or shed (counted as
    // a gap); before, all of them queued
    let most = 0
    await until(() => {
      most = Math.max(most, t.lock.waiting)
      return t.lock.waiting + C.events.stats.gossip.gap - gapsBefore >= EVENTS + 1
    }, 'every gossiped event judged at the observer', 60_000)
    expect(most).toBeLessThanOrEqual(EVENTS_LOCK_WAITING_MAX)
    expect(t.lock.waiting).toBeLessThanOrEqual(EVENTS_LOCK_WAITING_MAX)
    expect(C.events.stats.gossip.gap).toBeGreaterThan(gapsBefore)
    expect(C.events.stats.lockShed).toBeGreaterThan(0)
    // nothing was written meanwhile: the write holding the lock still waits for the disk
    expect(t.lock.busy).toBeGreaterThan(0)

    // the disk is back: what waited is placed, the runs whose gossip was shed are fetched, and the subscriber and
    // the log both end up with the whole run, in order, with no hole
    store.resume()
    await until(() => got.filter(e => e.run_id === run.run_id).length >= TOTAL, 'the whole run at the observer\'s subscriber', 60_000)
    expect(got.filter(e => e.run_id === run.run_id).map(e => e.seq)).toEqual(Array.from({ length: TOTAL }, (_, i) => i + 1))
    await until(async () => ((await C.events.readCorrelation(TASK)).get(run.run_id)?.length ?? 0) === TOTAL, 'the observer\'s log to hold the whole run', 60_000)
    const log = (await C.events.readCorrelation(TASK)).get(run.run_id) ?? []
    expect(log.map(e => e.seq)).toEqual(Array.from({ length: TOTAL }, (_, i) => i + 1))
    expect(log.at(-1)?.type).toBe('run.completed')
    expect((await C.events.lastEvent(run.run_id))?.seq).toBe(TOTAL)
    await until(() => t.lock.busy === 0, 'the lock to drain')
    await subscribed
    sub?.close()
  }, 180_000)
})
