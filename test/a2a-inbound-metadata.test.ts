/**
 * An A2A task's metadata names its run as protocols/a2a.md says (run id,
 * executing agent, capability, correlation) through all of its updates, the
 * SDK replacing the extension object with each update's; after a handoff it
 * names the next run and its agent. A CancelTask right after a handoff
 * cancels the run that carries the task on, not the one handed off. Real
 * nodes; the A2A side is @a2a-js/sdk's client.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import type { Task } from '@a2a-js/sdk'
import { ClientFactory, type Client } from '@a2a-js/sdk/client'
import { A2A_MESH_EXTENSION_URI, PART_PROGRESS } from '../src/a2a/constants.ts'
import { A2aServer } from '../src/a2a/server.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { asTask, partData, runIdOf, send } from './fixtures/a2a-messages.ts'

const ECHO = { capability_id: 'cap:echo', version: '1.0.0' }
/** Blocks; handed off once the test says so; the specialist answers, or works until canceled when the input says hold. */
const ASK = { capability_id: 'cap:ask-then-hand-off', version: '1.0.0' }

function extensionOf (task: Task): Record<string, unknown> {
  return task.metadata?.[A2A_MESH_EXTENSION_URI] as Record<string, unknown>
}

describe('A2A inbound: the task metadata names the run that carries the task', () => {
  let nodes: MeshNode[] = []
  let worker: MeshNode, specialist: MeshNode, gateway: MeshNode
  let a2a: A2aServer
  let client: Client
  const handOff = new Map<string, () => void>()
  /** Why each blocked run's wait for a resolution ended without one (its handoff). */
  const unanswered: unknown[] = []

  beforeAll(async () => {
    nodes = await startMesh(3, { transport: 'tcp' })
    ;[worker, specialist, gateway] = nodes as [MeshNode, MeshNode, MeshNode]
    worker.runs.handle(ECHO, async (ctx) => ({ echo: ctx.input }))
    worker.runs.handle(ASK, async (ctx) => {
      const go = new Promise<void>(resolve => { handOff.set(ctx.run.correlation_id, resolve) })
      // the run is handed off while blocked (by its delegator: handOffBlocked): the wait for a resolution then
      // rejects, which is expected here
      ctx.block('a human or the specialist', `cp-${ctx.run.correlation_id}`).catch((err: unknown) => { unanswered.push(err) })
      await go
      return undefined
    })
    specialist.runs.handle(ASK, async (ctx) => {
      const input = ctx.handedOff?.context?.input as { hold?: boolean } | undefined
      if (input?.hold === true) await new Promise<void>(resolve => { ctx.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
      return { decided_by: 'specialist' }
    })
    await worker.publishCard({ name: 'worker', capabilities: [ECHO, ASK], tags: ['test'] })
    await specialist.publishCard({ name: 'specialist', capabilities: [ASK], tags: ['test'] })
    await gateway.publishCard({ name: 'gateway', capabilities: [] })
    a2a = await A2aServer.start(gateway, { port: 0, logger: silentLogger() })
    client = await new ClientFactory().createFromUrl(a2a.clientUrl(worker.agentId))
  })
  afterAll(async () => {
    await a2a?.close()
    await stopAll(nodes)
  })

  /** The blocked run handed off by its delegator, the gateway's node (its executor may not hand off a blocked run); then its handler is let go. */
  async function handOffBlocked (runId: string, correlation: string, input: Record<string, unknown>): Promise<void> {
    await gateway.handoff(runId, specialist.agentId, { note: 'over to you', input })
    handOff.get(correlation)?.()
  }

  it('a task\'s metadata keeps naming its run, executing agent, capability and correlation after its updates', async () => {
    const done = asTask(await client.sendMessage(send(ECHO, { a: 1 })))
    expect(done.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    for (const t of [done, await client.getTask({ tenant: '', id: done.id })]) {
      expect(extensionOf(t)).toMatchObject({ run_id: runIdOf(done), agent_id: worker.agentId, capability: ECHO, correlation_id: done.contextId })
    }
  })

  it('after a handoff the task names the next run and the agent that executes it', async () => {
    const task = asTask(await client.sendMessage(send(ASK, { order: 1 }, 'corr-meta-handoff')))
    expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const first = runIdOf(task)
    await handOffBlocked(first, 'corr-meta-handoff', { order: 1 })
    await until(async () => (await client.getTask({ tenant: '', id: task.id })).status?.state === TaskState.TASK_STATE_COMPLETED, 'the next run to complete the task')
    const next = (await gateway.getRun(first)).handoff_to
    expect(next?.agent_id).toBe(specialist.agentId)
    const got = await client.getTask({ tenant: '', id: task.id })
    expect(extensionOf(got)).toMatchObject({ run_id: next?.run_id, agent_id: specialist.agentId, capability: ASK, correlation_id: 'corr-meta-handoff' })
  })

  it('a CancelTask right after a handoff cancels the next run', async () => {
    const task = asTask(await client.sendMessage(send(ASK, { hold: true }, 'corr-meta-cancel')))
    const first = runIdOf(task)
    const stream = client.resubscribeTask({ tenant: '', id: task.id })
    expect((await stream.next()).done).toBe(false)
    await handOffBlocked(first, 'corr-meta-cancel', { hold: true })
    // the handoff reaches the task: cancel at once
    for await (const ev of stream) {
      const p = ev.payload
      if (p?.$case === 'statusUpdate' && partData(p.value.status?.message?.parts, PART_PROGRESS)?.payload !== undefined) {
        const payload = partData(p.value.status?.message?.parts, PART_PROGRESS)?.payload as { transition?: string }
        if (payload.transition === 'handoff') break
      }
    }
    const canceled = await client.cancelTask({ tenant: '', id: task.id, metadata: undefined })
    expect(canceled.status?.state).toBe(TaskState.TASK_STATE_CANCELED)
    const next = (await gateway.getRun(first)).handoff_to
    expect(next?.agent_id).toBe(specialist.agentId)
    await until(async () => (await specialist.runs.store.get(next!.run_id))?.state === 'failed', 'the next run to be canceled')
    expect((await specialist.runs.store.get(next!.run_id))?.failure?.code).toBe('CANCELED')
  })
})
