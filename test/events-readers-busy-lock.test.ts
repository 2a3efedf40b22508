/**
 * Readers of a task whose lock is behind (lock-queues.ts): a new subscription
 * waits aside for the lock instead of being refused at once, and once the
 * lock has run what waited, only the readers' own count
 * (EVENTS_LOCK_READERS_MAX) keeps a reader aside, not gossip's. Before, a
 * subscription was refused with TIMEOUT (correlation_busy) whenever
 * EVENTS_LOCK_WAITING_MAX tasks waited, and a flood of one task's gossip on a
 * slow disk, which refills that bound as fast as the disk drains it, refused
 * every new subscription and kept an iterator's pull waiting for as long as
 * it lasted.
 *
 * The flood is made the way gossip makes it: each task on the lock takes a
 * turn of the event loop (the slow disk), and the queue is topped up to
 * EVENTS_LOCK_WAITING_MAX as each one starts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent, Run } from '../src/runlog/types.ts'
import { EVENTS_LOCK_WAITING_MAX } from '../src/events/constants.ts'
import type { CorrTrack } from '../src/events/track.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { collect } from './events-helpers.ts'
import { corrTrack, holdLock } from './fixtures/held-lock.ts'

const WORK = { capability_id: 'cap:readers-busy-lock', version: '1.0.0' }
const STEPS = 3
// run.started, STEPS, run.completed
const TOTAL = STEPS + 2

/** Keep EVENTS_LOCK_WAITING_MAX tasks waiting on `t`'s lock, each a turn of the event loop long, until stopped. */
function flood (t: CorrTrack): () => Promise<void> {
  let on = true
  const top = (): void => {
    while (on && t.lock.waiting < EVENTS_LOCK_WAITING_MAX) {
      void t.lock.run(async () => {
        top()
        await new Promise(resolve => setImmediate(resolve))
      })
    }
  }
  top()
  return async () => {
    on = false
    await t.lock.idle()
  }
}

function seqs (events: AgentEvent[], runId: string): number[] {
  return events.filter(e => e.run_id === runId).map(e => e.seq)
}

describe('readers of a task whose lock is behind', () => {
  const TASK = 'task-readers-busy-lock'
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let run: Run

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      for (let i = 0; i < STEPS; i++) await ctx.progress({ step: i })
      return { done: true }
    })
    await B.publishCard({ name: 'worker-b', capabilities: [WORK] })
    run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    await until(async () => (await B.events.lastEvent(run.run_id))?.seq === TOTAL, 'the run in the executor\'s log')
  }, 60_000)
  afterAll(async () => { await stopAll(nodes) })

  it('subscribe and an iterator\'s pull get their turn while gossip keeps the lock at its bound', async () => {
    // an iterator reads its history at its own pace (catch-up.ts), one pull on the lock per page
    const reader = await B.events.subscribe(TASK, { owner: A.agentId })
    const t = corrTrack(B, TASK)
    const stop = flood(t)
    const refused = B.events.stats.lockRefused.subscribe
    try {
      expect(t.lock.waiting).toBe(EVENTS_LOCK_WAITING_MAX)
      // before: refused at once with TIMEOUT (correlation_busy)
      let err: unknown
      const onB = await collect(B, TASK, { owner: A.agentId }).catch((e: unknown) => { err = e })
      expect({ err: (err as Error | undefined)?.message, refused: B.events.stats.lockRefused.subscribe - refused }).toEqual({ err: undefined, refused: 0 })
      await onB?.until(es => seqs(es, run.run_id).length === TOTAL, 'the whole run at the new subscriber')
      expect(seqs(onB?.events ?? [], run.run_id)).toEqual(Array.from({ length: TOTAL }, (_, i) => i + 1))
      onB?.sub.close()

      // before: the pull waited for a lock that never had room
      let caughtUp = false
      const past = reader.pastHistory().then(() => { caughtUp = true })
      await until(() => caughtUp || reader.closed, 'the iterator to read its history')
      await past
      expect(reader.closed).toBe(false)
    } finally {
      await stop()
      reader.close()
    }
  }, 60_000)

  it('a subscription waiting aside ends when its caller\'s signal aborts', async () => {
    // someone follows the task already, so it is tracked
    const follower = await collect(B, TASK, { owner: A.agentId })
    const t = corrTrack(B, TASK)
    // a stalled write holds the lock, with the gossip bound behind it
    const release = await holdLock(t)
    const waited = B.events.stats.subscribeWaited ?? 0
    const refused = B.events.stats.lockRefused.subscribe
    try {
      const abort = new AbortController()
      const sub = B.events.subscribe(TASK, { owner: A.agentId, onEvent: () => {}, signal: abort.signal })
      let failed: unknown
      sub.catch((e: unknown) => { failed = e })
      // before: refused at once
      await until(() => (B.events.stats.subscribeWaited ?? 0) > waited || failed !== undefined, 'the subscription to wait aside')
      expect(failed).toBeUndefined()
      abort.abort()
      // it ends without waiting for the lock, and is not refused: its caller left
      expect((await sub).closed).toBe(true)
      expect(B.events.stats.lockRefused.subscribe - refused).toBe(0)
      expect(t.lock.waiting).toBe(EVENTS_LOCK_WAITING_MAX)
    } finally {
      await release()
      follower.sub.close()
    }
  }, 60_000)
})
