/**
 * A task whose run the gateway stops following (its correlation stayed busy
 * here past A2A_BUSY_RETRIES_MAX tries: a stalled disk) shows its run as it
 * is, and an A2A resume of it is checked against the run, not against the
 * task as last saved. Before, the execution ended with the task as it had
 * published it (WORKING) until a client read it, so the SendMessage answer
 * said WORKING of a run that waited for a human; and a resume sent before any
 * read was refused as "not waiting for input", though the run was. Now the
 * gateway reads the run when it gives up and publishes what it finds, and a
 * resume of a task nothing follows that does not show input-required has its
 * run read first. Real nodes; the lock is held as a stalled write holds it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import { ClientFactory, type Client } from '@a2a-js/sdk/client'
import { A2aServer } from '../src/a2a/server.ts'
import { PART_RESUME } from '../src/a2a/constants.ts'
import { silentLogger } from '../src/logger.ts'
import type { EventSubscription } from '../src/events/subscription.ts'
import { until } from './helpers.ts'
import { APPROVE, startA2aMesh, stopA2aMesh, type A2aMesh } from './fixtures/a2a-mesh.ts'
import { asTask, data, handlerOf, runIdOf, send, userMessage, type CapabilityRef } from './fixtures/a2a-messages.ts'
import { corrTrack, holdLock } from './fixtures/held-lock.ts'

/** Blocks only once the test lets it (it is still running when the gateway gives up on it). */
const LATE: CapabilityRef = { capability_id: 'cap:late-block', version: '1.0.0' }
const lateGate = Promise.withResolvers<void>()

function resumeOf (task: { id: string, contextId: string }): Parameters<Client['sendMessage']>[0] {
  return { tenant: '', message: userMessage([data(PART_RESUME, { resolution: { approved: true } })], { taskId: task.id, contextId: task.contextId }), configuration: undefined, metadata: undefined }
}

describe('an A2A task whose run the gateway stopped following (busy lock)', () => {
  let m: A2aMesh | undefined
  let small: A2aServer | undefined
  const followers: EventSubscription[] = []
  beforeAll(async () => {
    m = await startA2aMesh({
      more: [[LATE, async (ctx) => {
        await lateGate.promise
        const resolution = await ctx.block('a late question', `late-${ctx.run.correlation_id}`)
        return { approved: resolution.approved }
      }]]
    })
    // one try again before it gives up (A2A_BUSY_RETRIES_MAX is a minute of a stalled lock)
    small = await A2aServer.start(m.gateway, { port: 0, logger: silentLogger(), busyRetriesMax: 1 })
  }, 60_000)
  afterAll(async () => {
    lateGate.resolve()
    for (const f of followers) f.close()
    await small?.close()
    await stopA2aMesh(m)
  })

  /** Hold the gateway's lock of `ctx` (someone follows it already, so it is tracked); returns its release. */
  async function stall (ctx: string): Promise<() => Promise<void>> {
    const { gateway } = m as A2aMesh
    followers.push(await gateway.events.subscribe(ctx, { onEvent: () => {} }))
    return await holdLock(corrTrack(gateway, ctx))
  }

  it('answers the SendMessage with the run\'s state when it gives up: input-required for a run that waits for a human', async () => {
    const { worker } = m as A2aMesh
    const c = await new ClientFactory().createFromUrl((small as A2aServer).clientUrl(worker.agentId))
    const release = await stall('a2a-gave-up-blocked')
    let task
    try {
      task = asTask(await c.sendMessage(send(APPROVE, { order: 'gave-up' }, 'a2a-gave-up-blocked')))
      const runs = (await handlerOf(small as A2aServer, worker.agentId)).runs
      expect(runs.stats.busyGaveUp).toBe(1)
      expect((await worker.getRun(runIdOf(task))).state).toBe('blocked')
      // before: TASK_STATE_WORKING, the task as the execution had published it
      expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    } finally {
      await release()
    }
    // resumed with no read between: the run goes on to its end
    const resumed = asTask(await c.sendMessage(resumeOf(task)))
    expect(resumed.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect((await worker.getRun(runIdOf(task))).state).toBe('completed')
  }, 60_000)

  it('resumes a task whose run blocked after the gateway gave up, with no read before the resume', async () => {
    const { worker } = m as A2aMesh
    const c = await new ClientFactory().createFromUrl((small as A2aServer).clientUrl(worker.agentId))
    const release = await stall('a2a-gave-up-late')
    let task
    try {
      task = asTask(await c.sendMessage(send(LATE, { order: 'late' }, 'a2a-gave-up-late')))
      // the run was working when the gateway gave up on it: so the task says
      expect(task.status?.state).toBe(TaskState.TASK_STATE_WORKING)
    } finally {
      await release()
    }
    const runId = runIdOf(task)
    lateGate.resolve()
    await until(async () => (await worker.getRun(runId)).state === 'blocked', 'the run to block after the gateway gave up')
    // before: refused, "task ... is not waiting for input", from the task as saved
    const resumed = asTask(await c.sendMessage(resumeOf(task)))
    expect(resumed.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect((await worker.getRun(runId)).state).toBe('completed')
  }, 60_000)
})
