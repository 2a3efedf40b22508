/**
 * A2A tasks outlive a restart of the node that serves them (same data
 * directory): a client polling GetTask after the restart finds its task, as
 * its mesh run now stands: a completed one with its output artifact, one
 * waiting for input still waiting (and resumable), one whose run completed
 * while the node was down completed. Records that cannot be read (damaged,
 * another version's, another task's) are skipped and counted, not fatal.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import type { Client } from '@a2a-js/sdk/client'
import { LevelDatastore } from 'datastore-level'
import { Key } from 'interface-datastore'
import { A2A_TASK_RECORDS_DIR, PART_OUTPUT, PART_RESUME } from '../src/a2a/constants.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'
import { RestartingGateway } from './fixtures/a2a-gateway.ts'
import { asTask, data, partData, runIdOf, send, userMessage } from './fixtures/a2a-messages.ts'

const ECHO = { capability_id: 'cap:echo', version: '1.0.0' }
const APPROVE = { capability_id: 'cap:approve', version: '1.0.0' }
const GATE = { capability_id: 'cap:gate', version: '1.0.0' }

describe('A2A tasks across a restart of their node', () => {
  let dataDir = ''
  let worker: MeshNode
  const gates = new Map<string, PromiseWithResolvers<void>>()

  const gw = new RestartingGateway(() => dataDir, () => worker)
  const startGateway = async (): Promise<Client> => gw.start()
  const stopGateway = async (): Promise<void> => gw.stop()

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'aap-a2a-restart-'))
    ;[worker] = await startLoneNodes(1, { logger: silentLogger() }) as [MeshNode]
    worker.runs.handle(ECHO, async (ctx) => ({ echo: ctx.input }))
    worker.runs.handle(APPROVE, async (ctx) => ({ approved: (await ctx.block('a human decides', `cp-${ctx.run.correlation_id}`)).approved }))
    worker.runs.handle(GATE, async (ctx) => {
      const gate = Promise.withResolvers<void>()
      gates.set(ctx.run.correlation_id, gate)
      await gate.promise
      return { opened: true }
    })
    await worker.publishCard({ name: 'worker', capabilities: [ECHO, APPROVE, GATE] })
  })
  afterEach(async () => {
    await stopGateway()
  })
  afterAll(async () => {
    for (const g of gates.values()) g.resolve()
    await stopGateway()
    await stopAll([worker])
    await rm(dataDir, { recursive: true, force: true })
  })

  it('GetTask after the restart returns each task as its run stands, and a waiting one resumes', async () => {
    let client = await startGateway()
    const agentId = gw.node!.agentId
    const done = asTask(await client.sendMessage(send(ECHO, { hello: 'before' }, 'ctx-restart-done')))
    expect(done.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    const waiting = asTask(await client.sendMessage(send(APPROVE, { order: 7 }, 'ctx-restart-waiting')))
    expect(waiting.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const req = send(GATE, {}, 'ctx-restart-working')
    const working = asTask(await client.sendMessage({ ...req, configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: true } } as never))
    await until(() => gates.has('ctx-restart-working'), 'the gated run to start')
    expect(working.status?.state).toBe(TaskState.TASK_STATE_WORKING)

    await stopGateway()
    // the run goes on at its executor while the node that serves its task is down
    gates.get('ctx-restart-working')!.resolve()
    await until(async () => (await worker.runs.store.get(runIdOf(working)))?.state === 'completed', 'the gated run to complete')

    client = await startGateway()
    expect(gw.node!.agentId).toBe(agentId)
    const doneAfter = await client.getTask({ tenant: '', id: done.id })
    expect(doneAfter.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(partData(doneAfter.artifacts[0]?.parts, PART_OUTPUT)?.output).toEqual({ echo: { hello: 'before' } })
    expect(doneAfter.history.length).toBeGreaterThan(0)
    expect(doneAfter.contextId).toBe('ctx-restart-done')

    const waitingAfter = await client.getTask({ tenant: '', id: waiting.id })
    expect(waitingAfter.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    expect((await gw.node!.getRun(runIdOf(waiting))).state).toBe('blocked')

    const workingAfter = await client.getTask({ tenant: '', id: working.id })
    expect(workingAfter.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(partData(workingAfter.artifacts.find(a => partData(a.parts, PART_OUTPUT) !== undefined)?.parts, PART_OUTPUT)?.output).toEqual({ opened: true })

    // the task waiting for input is the client's to resume, as before the restart
    const resumed = asTask(await client.sendMessage({
      tenant: '', configuration: undefined, metadata: undefined,
      message: userMessage([data(PART_RESUME, { resolution: { approved: true } })], { taskId: waiting.id, contextId: waiting.contextId })
    }))
    expect(resumed.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(partData(resumed.artifacts.find(a => partData(a.parts, PART_OUTPUT) !== undefined)?.parts, PART_OUTPUT)?.output).toEqual({ approved: true })
    expect(gw.a2a!.taskRecords?.loaded).toBe(3)
    expect(gw.a2a!.taskRecords?.skipped).toBe(0)
  })

  it('records that cannot be read are skipped and counted; the tasks beside them load', async () => {
    let client = await startGateway()
    const done = asTask(await client.sendMessage(send(ECHO, { hello: 'beside' }, 'ctx-restart-beside')))
    await stopGateway()

    // damaged, another version's, another task's: written where the worker's tasks are kept
    const level = new LevelDatastore(join(dataDir, A2A_TASK_RECORDS_DIR))
    await level.open()
    const prefix = `/a2a/tasks/${worker.agentId}`
    const json = (v: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(v))
    const good = await level.get(new Key(`${prefix}/${encodeURIComponent(done.id)}`))
    const record = JSON.parse(new TextDecoder().decode(good)) as { v: number, seq: number, task: { id: string } }
    await level.put(new Key(`${prefix}/damaged`), new Uint8Array([0xff, 0x00, 0x7b]))
    await level.put(new Key(`${prefix}/later-version`), json({ ...record, v: 99 }))
    await level.put(new Key(`${prefix}/another-task`), json(record))
    await level.put(new Key(`${prefix}/no-task`), json({ v: 1, seq: 1, task: [] }))
    await level.close()

    client = await startGateway()
    const after = await client.getTask({ tenant: '', id: done.id })
    expect(after.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(partData(after.artifacts[0]?.parts, PART_OUTPUT)?.output).toEqual({ echo: { hello: 'beside' } })
    expect(gw.a2a!.taskRecords?.skipped).toBe(4)
    await expect(client.getTask({ tenant: '', id: 'another-task' })).rejects.toThrow(/not found/i)
  })
})
