/**
 * Tasks loaded at a restart and the count bound (A2A_TASKS_MAX_PER_AGENT):
 * with more records than the bound (it was lowered, or a failed delete left
 * some), the finished tasks past it go, least recently written first, and
 * every open task is kept, even past the count: a task waiting for input is
 * never pushed out and its run never canceled by the load, nor by a later
 * save of another open task. New tasks are refused while the open ones fill
 * the count.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { TaskState, type Task } from '@a2a-js/sdk'
import type { Client } from '@a2a-js/sdk/client'
import { PART_OUTPUT, PART_RESUME } from '../src/a2a/constants.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startLoneNodes, stopAll } from './helpers.ts'
import { RestartingGateway } from './fixtures/a2a-gateway.ts'
import { asTask, data, handlerOf, partData, runIdOf, send, userMessage } from './fixtures/a2a-messages.ts'

const ECHO = { capability_id: 'cap:echo', version: '1.0.0' }
const APPROVE = { capability_id: 'cap:approve', version: '1.0.0' }

describe('A2A tasks loaded at a restart past the count bound', () => {
  let dataDir = ''
  let worker: MeshNode

  const gw = new RestartingGateway(() => dataDir, () => worker)
  const startGateway = async (maxTasks: number): Promise<Client> => gw.start({ maxTasksPerAgent: maxTasks })
  const stopGateway = async (): Promise<void> => gw.stop()

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'aap-a2a-restart-bound-'))
    ;[worker] = await startLoneNodes(1, { logger: silentLogger() }) as [MeshNode]
    worker.runs.handle(ECHO, async (ctx) => ({ echo: ctx.input }))
    worker.runs.handle(APPROVE, async (ctx) => ({ approved: (await ctx.block('a human decides', `cp-${ctx.run.correlation_id}`)).approved }))
    await worker.publishCard({ name: 'worker', capabilities: [ECHO, APPROVE] })
  })
  afterEach(async () => {
    await stopGateway()
  })
  afterAll(async () => {
    await stopGateway()
    await stopAll([worker])
    await rm(dataDir, { recursive: true, force: true })
  })

  it('finished tasks past the bound go oldest first; every waiting task stays, its run blocked', async () => {
    let client = await startGateway(5)
    const older = asTask(await client.sendMessage(send(ECHO, { n: 1 }, 'ctx-bound-restart-done-1')))
    const newer = asTask(await client.sendMessage(send(ECHO, { n: 2 }, 'ctx-bound-restart-done-2')))
    const waiting: Task[] = []
    for (let i = 0; i < 3; i++) waiting.push(asTask(await client.sendMessage(send(APPROVE, { n: i }, `ctx-bound-restart-waiting-${i}`))))
    for (const t of waiting) expect(t.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    await stopGateway()

    /** Each waiting task is still its client's, and its run still waits. */
    const stillWaiting = async (tasks: Task[]): Promise<void> => {
      for (const t of tasks) {
        expect((await client.getTask({ tenant: '', id: t.id })).status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
        expect((await gw.node!.getRun(runIdOf(t))).state).toBe('blocked')
      }
    }

    // the bound lowered to 4: the three open tasks leave room for one finished task, the most recently written
    client = await startGateway(4)
    await stillWaiting(waiting)
    expect((await client.getTask({ tenant: '', id: newer.id })).status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    await expect(client.getTask({ tenant: '', id: older.id })).rejects.toThrow(/not found/i)
    await stopGateway()

    // lowered to 2, under the open tasks: no finished task is kept, and every open one is
    client = await startGateway(2)
    await stillWaiting(waiting)
    await expect(client.getTask({ tenant: '', id: newer.id })).rejects.toThrow(/not found/i)
    const h = await handlerOf(gw.a2a!, worker.agentId)
    expect(h.store.size).toBe(3)
    expect(h.store.open).toBe(3)
    expect(h.store.droppedAtLoad).toBe(1)
    // the open tasks fill the count: a new task is refused before its run starts
    const delegate = gw.node!.delegate.bind(gw.node)
    let delegated = 0
    gw.node!.delegate = async (req, opts) => {
      delegated++
      return await delegate(req, opts)
    }
    await expect(client.sendMessage(send(ECHO, { n: 9 }, 'ctx-bound-restart-new'))).rejects.toThrow(/A2A_TASKS_MAX_PER_AGENT/)
    expect(delegated).toBe(0)

    // a waiting task resumed to its end is saved again (past the count) and pushes out no other open task
    const [first, ...rest] = waiting as [Task, ...Task[]]
    const resumed = asTask(await client.sendMessage({
      tenant: '', configuration: undefined, metadata: undefined,
      message: userMessage([data(PART_RESUME, { resolution: { approved: true } })], { taskId: first.id, contextId: first.contextId })
    }))
    expect(resumed.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    const after = await client.getTask({ tenant: '', id: first.id })
    expect(partData(after.artifacts.find(a => partData(a.parts, PART_OUTPUT) !== undefined)?.parts, PART_OUTPUT)?.output).toEqual({ approved: true })
    await stillWaiting(rest)
    for (const t of rest) await gw.node!.cancel(runIdOf(t), 'test cleanup')
  })
})
