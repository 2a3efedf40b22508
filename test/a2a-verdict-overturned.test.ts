/**
 * An A2A task FAILED by its delegator's liveness verdict (run.failed,
 * EXECUTOR_LOST) is not final for good: when the executor was only cut off
 * and completed the run meanwhile, its events replace the verdict in the
 * delegator's record, and the next client read of the task (GetTask) reads
 * the run again and shows it COMPLETED with its output.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import { ClientFactory } from '@a2a-js/sdk/client'
import { PART_FAILURE, PART_OUTPUT } from '../src/a2a/constants.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { A2aServer } from '../src/a2a/server.ts'
import { until } from './helpers.ts'
import { cutControl, gatedWorker } from './fixtures/control-cut.ts'
import { asTask, partData, runIdOf, send } from './fixtures/a2a-messages.ts'

const GATE = { capability_id: 'cap:gate', version: '1.0.0' }


describe('A2A inbound: a verdict the executor overturns', () => {
  let A: MeshNode, B: MeshNode
  let a2a: A2aServer
  const gates = new Map<string, PromiseWithResolvers<void>>()
  const opts = { listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true }


  beforeAll(async () => {
    A = await createMeshNode({ ...opts, liveness: { lostAfterMs: 1500, probeIntervalMs: 200 } })
    B = await createMeshNode(opts)
    await A.start()
    await B.start()
    await B.join([A.addresses[0]!])
    await gatedWorker(B, GATE, gates)
    await A.publishCard({ name: 'gw', capabilities: [] })
    a2a = await A2aServer.start(A, { port: 0, logger: silentLogger() })
  })
  afterAll(async () => {
    await a2a?.close()
    for (const n of [A, B]) await n?.stop()
  })

  it('a task failed by an EXECUTOR_LOST verdict shows the run completed once the executor is heard again', async () => {
    const client = await new ClientFactory().createFromUrl(a2a.clientUrl(B.agentId))
    const req = send(GATE, {}, 'ctx-verdict-overturned')
    const task = asTask(await client.sendMessage({ ...req, configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: true } } as never))
    const runId = runIdOf(task)
    await until(() => gates.has('ctx-verdict-overturned'), 'the handler at work')
    const restore = await cutControl(B)
    await until(async () => (await A.runs.store.getOutgoing(runId))?.failure?.code === 'EXECUTOR_LOST', 'the verdict', 30_000)
    await until(async () => (await client.getTask({ tenant: '', id: task.id })).status?.state === TaskState.TASK_STATE_FAILED, 'the task failed by the verdict')
    const failed = await client.getTask({ tenant: '', id: task.id })
    expect(partData(failed.status?.message?.parts, PART_FAILURE)?.code).toBe('EXECUTOR_LOST')

    // the executor was only cut off: it completes the run, and is heard again
    gates.get('ctx-verdict-overturned')!.resolve()
    await until(async () => (await B.runs.store.get(runId))?.state === 'completed', 'the executor completes')
    await restore()
    await until(async () => (await A.runs.store.getOutgoing(runId))?.state === 'completed', 'the delegator\'s record follows the executor', 30_000)
    await until(async () => (await client.getTask({ tenant: '', id: task.id })).status?.state === TaskState.TASK_STATE_COMPLETED, 'the task to show the run completed')
    const done = await client.getTask({ tenant: '', id: task.id })
    expect(partData(done.artifacts.find(a => partData(a.parts, PART_OUTPUT) !== undefined)?.parts, PART_OUTPUT)?.output).toEqual({ done: true })
    // the history the task had is kept
    expect(done.history.length).toBeGreaterThan(0)
  }, 90_000)
})
