/**
 * An A2A message whose conversation (contextId, the correlation) is behind on
 * the gateway's lock (a slow disk, a burst of one task's gossip) waits for it:
 * its run goes on and the client gets the task. Before, the gateway's
 * subscription was refused at once with TIMEOUT (correlation_busy), and its
 * follower treated that as fatal: it canceled the run it had just started
 * and failed the message. Now a subscription waits aside for the lock
 * (EVENTS_SUBSCRIBE_BUSY_WAIT_MS, src/events/lock-queues.ts), and a follower
 * whose subscription was refused all the same tries again
 * (src/a2a/task-runs.ts), as it does for topic_limit. It tries again at most
 * A2A_BUSY_RETRIES_MAX times (before, for ever: the client's SendMessage
 * and the follower waited as long as the disk did); then the run goes on
 * unfollowed, its task as a dropped watch leaves it, read again when read.
 *
 * The lock is held the way a stalled write holds it: a task on it that does
 * not end, with EVENTS_LOCK_WAITING_MAX tasks behind it (the gossip bound).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import { ClientFactory } from '@a2a-js/sdk/client'
import { A2aServer } from '../src/a2a/server.ts'
import { silentLogger } from '../src/logger.ts'
import type { CorrTrack } from '../src/events/track.ts'
import type { EventSubscription } from '../src/events/subscription.ts'
import { until } from './helpers.ts'
import { APPROVE, startA2aMesh, stopA2aMesh, type A2aMesh } from './fixtures/a2a-mesh.ts'
import { asTask, handlerOf, runIdOf, send } from './fixtures/a2a-messages.ts'
import { corrTrack, holdLock } from './fixtures/held-lock.ts'

/** What became of a message: the task's state, or the error the client got. */
async function outcome (p: Promise<unknown>): Promise<{ state?: TaskState, runId?: string, taskId?: string, err?: string }> {
  try {
    const task = asTask(await p)
    return { state: task.status?.state, runId: runIdOf(task), taskId: task.id }
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

  it('stops trying past its bound: the run goes on unfollowed, the task is not failed and shows the run when read', async () => {
    const { gateway, worker } = m as A2aMesh
    // one try again (the bound A2A_BUSY_RETRIES_MAX is a minute of a stalled lock)
    const small = await A2aServer.start(gateway, { port: 0, logger: silentLogger(), busyRetriesMax: 1 })
    let release: (() => Promise<void>) | undefined
    try {
      const c = await new ClientFactory().createFromUrl(small.clientUrl(worker.agentId))
      const CTX = 'a2a-busy-lock-bounded'
      release = await holdLock(await followed(CTX))
      let answered: Awaited<ReturnType<typeof outcome>> | undefined
      void outcome(c.sendMessage(send(APPROVE, { order: 'bounded' }, CTX))).then((o) => { answered = o })
      // before: the follower tried again for as long as the lock stayed behind, and the message had no answer
      await until(() => answered !== undefined, 'the message to be answered while the lock is still held', 30_000)
      const got = answered as Awaited<ReturnType<typeof outcome>>
      expect(got.err).toBeUndefined()
      // the run's state read once the follower gave up, not failed, and not the working state the execution had
      // published (before: working, and a resume sent before a read was refused as not waiting for input)
      expect(got.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
      const runs = (await handlerOf(small, worker.agentId)).runs
      expect(runs.stats.busyRetries).toBe(1)
      expect(runs.stats.busyGaveUp).toBe(1)
      expect(runs.stats.watchErrors).toBe(0)
      expect(runs.following).toBe(0)
      // its run was not canceled: it waits for the human
      expect((await worker.getRun(got.runId as string)).state).toBe('blocked')
      await release()
      release = undefined
      // nothing follows the task: a read brings it up to date with its run
      await until(async () => (await c.getTask({ tenant: '', id: got.taskId as string })).status?.state === TaskState.TASK_STATE_INPUT_REQUIRED, 'the task to show its run blocked when read')
      await gateway.cancel(got.runId as string, 'cleanup')
    } finally {
      await release?.()
      await small.close()
    }
  }, 60_000)
})
