/**
 * CancelTask on a task loaded after the gateway restarted. Such a task has no
 * bus in the SDK, which then writes TASK_STATE_CANCELED to the store itself
 * and never calls the executor: the client would be told CANCELED while the
 * mesh run went on (blocked for ever, or working) and held its context's turn.
 * The handler gives such a task a bus first, so the cancel goes through the
 * executor: the run is canceled on the mesh, and the context takes a new task.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { TaskState, type Task } from '@a2a-js/sdk'
import type { Client } from '@a2a-js/sdk/client'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'
import { RestartingGateway } from './fixtures/a2a-gateway.ts'
import { asTask, runIdOf, send } from './fixtures/a2a-messages.ts'

const APPROVE = { capability_id: 'cap:approve', version: '1.0.0' }
const GATE = { capability_id: 'cap:gate', version: '1.0.0' }

describe('A2A inbound: CancelTask after a restart cancels the run', () => {
  let dataDir = ''
  let worker: MeshNode
  const gate = Promise.withResolvers<void>()
  const gw = new RestartingGateway(() => dataDir, () => worker)
  afterAll(async () => {
    gate.resolve()
    await gw.stop()
    await stopAll([worker])
    await rm(dataDir, { recursive: true, force: true })
  })

  /** Cancel the loaded task; the run ends canceled on the mesh, and its context takes a new task. */
  async function cancelAndRetake (client: Client, t: Task): Promise<void> {
    const canceled = await client.cancelTask({ tenant: '', id: t.id, metadata: undefined })
    expect(canceled.status?.state).toBe(TaskState.TASK_STATE_CANCELED)
    await until(async () => (await worker.runs.store.get(runIdOf(t)))?.state === 'failed', 'the run to be canceled on the executor')
    expect((await worker.runs.store.get(runIdOf(t)))?.failure?.code).toBe('CANCELED')
    // the canceled run no longer holds the conversation's turn
    const next = asTask(await client.sendMessage(send(APPROVE, {}, t.contextId)))
    expect(next.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    await client.cancelTask({ tenant: '', id: next.id, metadata: undefined })
  }

  it('an input-required task and a working one, both loaded after a restart', async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'a2a-cancel-restart-'))
    ;[worker] = await startLoneNodes(1, { logger: silentLogger() }) as [MeshNode]
    const working = Promise.withResolvers<void>()
    worker.runs.handle(APPROVE, async (ctx) => ({ ok: (await ctx.block('decide', `cp-${ctx.run.run_id}`)).ok }))
    worker.runs.handle(GATE, async () => { working.resolve(); await gate.promise; return { done: true } })
    await worker.publishCard({ name: 'worker', capabilities: [APPROVE, GATE] })
    let client = await gw.start()
    const waiting = asTask(await client.sendMessage(send(APPROVE, {}, 'ctx-cancel-restart-input')))
    expect(waiting.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const req = send(GATE, {}, 'ctx-cancel-restart-working')
    const busy = asTask(await client.sendMessage({ ...req, configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: true } }))
    await working.promise
    await gw.stop()

    client = await gw.start()
    await cancelAndRetake(client, waiting)
    await cancelAndRetake(client, busy)
  })
})
