/**
 * An A2A message whose conversation (contextId, the correlation) is behind on
 * the gateway's lock (a slow disk, a burst of one task's gossip) waits for it:
 * its run goes on and the client gets the task. Before, the gateway's
 * subscription was refused at once with TIMEOUT (correlation_busy), and its
 * follower treated that as fatal: it canceled the run it had just started
 * and failed the message. Now a subscription waits aside for the lock
 * (EVENTS_SUBSCRIBE_BUSY_WAIT_MS, src/events/lock-queues.ts), and a follower
 * whose subscription was refused all the same tries again
 * (src/a2a/task-runs.ts), as it does for topic_limit.
 *
 * The lock is held the way a stalled write holds it: a task on it that does
 * not end, with EVENTS_LOCK_WAITING_MAX tasks behind it (the gossip bound).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import type { CorrTrack } from '../src/events/track.ts'
import type { EventSubscription } from '../src/events/subscription.ts'
import { until } from './helpers.ts'
import { APPROVE, startA2aMesh, stopA2aMesh, type A2aMesh } from './fixtures/a2a-mesh.ts'
import { asTask, handlerOf, runIdOf, send } from './fixtures/a2a-messages.ts'
import { corrTrack, holdLock } from './fixtures/held-lock.ts'

/** What became of a message: the task's state, or the error the client got. */
async function outcome (p: Promise<unknown>): Promise<{ state?: TaskState, runId?: string, err?: string }> {
  try {
    const task = asTask(await p)
    return { state: task.status?.state, runId: runIdOf(task) }
  } catch (err) {
    return { err: (err as Error).message.slice(0, 300) }
  }
}

describe('an A2A message while the gateway\'s lock of its context is behind', () => {
  let m: A2aMesh | undefined
  const followers: EventSubscription[] = []
  beforeAll(async () => { m = await startA2aMesh() }, 60_000)
  afterAll(async () => {
    for (const f of followers) f.close()
    await stopA2aMesh(m)
  })

  /** Someone on the gateway follows the conversation already (an earlier turn's stream, say), so it is tracked. */
  async function followed (ctx: string): Promise<CorrTrack> {
    const { gateway } = m as A2aMesh
    followers.push(await gateway.events.subscribe(ctx, { onEvent: () => {} }))
    return corrTrack(gateway, ctx)
  }

  it('waits for the lock to drain, and the run goes on', async () => {
    const { gateway, worker, client } = m as A2aMesh
    const CTX = 'a2a-busy-lock-brief'
    const t = await followed(CTX)
    const release = await holdLock(t)
    const waited = gateway.events.stats.subscribeWaited ?? 0
    const refused = gateway.events.stats.lockRefused.subscribe

    const answer = outcome(client.sendMessage(send(APPROVE, { order: 'brief' }, CTX)))
    // the gateway's follower reaches the lock: it waits aside (before: it was refused)
    await until(() => (gateway.events.stats.subscribeWaited ?? 0) > waited || gateway.events.stats.lockRefused.subscribe > refused,
      'the follower\'s subscription to reach the held lock', 30_000)
    expect(gateway.events.stats.lockRefused.subscribe - refused).toBe(0)
    // the disk comes back
    await release()

    const got = await answer
    expect(got.err).toBeUndefined()
    expect(got.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    // its run waits for the human, not canceled
    expect((await worker.getRun(got.runId as string)).state).toBe('blocked')
  }, 60_000)

  it('tries again when the lock stays behind past a subscription\'s wait, rather than cancel the run', async () => {
    const { gateway, worker, client, a2a } = m as A2aMesh
    const CTX = 'a2a-busy-lock-long'
    const t = await followed(CTX)
    const release = await holdLock(t)
    const refused = gateway.events.stats.lockRefused.subscribe

    const answer = outcome(client.sendMessage(send(APPROVE, { order: 'long' }, CTX)))
    // the lock stays behind for a subscription's whole wait: it is refused
    await until(() => gateway.events.stats.lockRefused.subscribe > refused, 'the follower\'s subscription to be refused', 30_000)
    const runs = (await handlerOf(a2a, worker.agentId)).runs
    // the follower tries again (before: it canceled the run and failed the message)
    await until(() => runs.stats.busyRetries > 0 || runs.following === 0, 'the follower to try again, or give up')
    await release()

    const got = await answer
    expect(got.err).toBeUndefined()
    expect(got.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    expect((await worker.getRun(got.runId as string)).state).toBe('blocked')
    expect(runs.stats.busyRetries).toBeGreaterThan(0)
  }, 60_000)
})
