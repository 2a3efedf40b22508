/**
 * An A2A task FAILED by its delegator's liveness verdict (EXECUTOR_LOST)
 * whose executor stays silent is not read from its executor again while a
 * client polls it: the refresher looks at the delegator's own record of the
 * run (which liveness updates when the executor is heard again), and makes
 * no get_run while that record still shows the verdict.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import { ClientFactory } from '@a2a-js/sdk/client'
import { PART_FAILURE } from '../src/a2a/constants.ts'
import { A2aServer } from '../src/a2a/server.ts'
import { silentLogger } from '../src/logger.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { until } from './helpers.ts'
import { cutControl, gatedWorker } from './fixtures/control-cut.ts'
import { asTask, handlerOf, partData, runIdOf, send } from './fixtures/a2a-messages.ts'

const GATE = { capability_id: 'cap:gate', version: '1.0.0' }

describe('A2A inbound: a task failed by a verdict that stands', () => {
  let A: MeshNode, B: MeshNode
  let a2a: A2aServer
  const gates = new Map<string, PromiseWithResolvers<void>>()
  const opts = { listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() }

  beforeAll(async () => {
    A = await createMeshNode({ ...opts, liveness: { lostAfterMs: 1500, probeIntervalMs: 200 } })
    B = await createMeshNode(opts)
    await A.start()
    await B.start()
    await B.join([A.addresses[0]!])
    await gatedWorker(B, GATE, gates)
    a2a = await A2aServer.start(A, { port: 0, logger: silentLogger() })
  })
  afterAll(async () => {
    for (const g of gates.values()) g.resolve()
    await a2a?.close()
    for (const n of [A, B]) await n?.stop()
  })

  it('polls of the task read the delegator\'s record, not the executor', async () => {
    const client = await new ClientFactory().createFromUrl(a2a.clientUrl(B.agentId))
    const req = send(GATE, {}, 'ctx-verdict-stands')
    const task = asTask(await client.sendMessage({ ...req, configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: true } } as never))
    const runId = runIdOf(task)
    await until(() => gates.has('ctx-verdict-stands'), 'the handler at work')
    // the executor stops answering control calls for good: the delegator's probes fail, and it declares the run lost
    await cutControl(B)
    await until(async () => (await A.runs.store.getOutgoing(runId))?.failure?.code === 'EXECUTOR_LOST', 'the verdict', 30_000)
    await until(async () => (await client.getTask({ tenant: '', id: task.id })).status?.state === TaskState.TASK_STATE_FAILED, 'the task failed by the verdict')
    const failed = await client.getTask({ tenant: '', id: task.id })
    expect(partData(failed.status?.message?.parts, PART_FAILURE)?.code).toBe('EXECUTOR_LOST')

    const refresher = (await handlerOf(a2a, B.agentId)).refresher
    const s = refresher.stats
    const reads = (): number => s.reads + s.readErrors
    const before = { reads: reads(), looks: s.verdictChecks ?? 0 }
    // a client polls the task across three refresh intervals: each is due, and each finds the verdict standing
    await until(async () => {
      expect((await client.getTask({ tenant: '', id: task.id })).status?.state).toBe(TaskState.TASK_STATE_FAILED)
      return reads() + (s.verdictChecks ?? 0) >= before.reads + before.looks + 3
    }, 'three refreshes of the polled task', 30_000)
    expect(reads()).toBe(before.reads)
    expect(s.verdictChecks).toBeGreaterThanOrEqual(before.looks + 3)
  }, 90_000)
})
