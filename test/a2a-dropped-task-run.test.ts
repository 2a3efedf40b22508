/**
 * An A2A task is never dropped while its mesh run waits for it unless the
 * run is ended first: no client could reach a blocked run again, and it
 * would hold its delegator's share of the executor's runs for ever. An agent
 * evicted to make room for another has the runs of its open tasks canceled;
 * card lookups of agents that do not exist push no served agent out; an
 * agent whose tasks are all open refuses a new task rather than drop one.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState, type Task } from '@a2a-js/sdk'
import { ClientFactory } from '@a2a-js/sdk/client'
import type { MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { A2aServer } from '../src/a2a/server.ts'
import { BoundedTaskStore } from '../src/a2a/task-store.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { asTask, runIdOf, send } from './fixtures/a2a-messages.ts'

const APPROVE = { capability_id: 'cap:approve', version: '1.0.0' }
const ECHO = { capability_id: 'cap:echo', version: '1.0.0' }

describe('A2A tasks dropped by the inbound server end their runs first', () => {
  let nodes: MeshNode[] = []
  let w1: MeshNode, w2: MeshNode, gateway: MeshNode
  const cleanup: string[] = []

  beforeAll(async () => {
    nodes = await startMesh(3, { transport: 'tcp' })
    ;[w1, w2, gateway] = nodes as [MeshNode, MeshNode, MeshNode]
    w1.runs.handle(APPROVE, async (ctx) => ({ r: await ctx.block('needs a human', `cp-${ctx.run.run_id}`) }))
    w2.runs.handle(ECHO, async (ctx) => ({ echo: ctx.input }))
    await w1.publishCard({ name: 'w1', capabilities: [APPROVE] })
    await w2.publishCard({ name: 'w2', capabilities: [ECHO] })
  })
  afterAll(async () => {
    for (const runId of cleanup) {
      const run = await gateway.getRun(runId)
      if (run.state === 'blocked') await gateway.cancel(runId, 'test cleanup')
    }
    await stopAll(nodes)
  })

  it('an agent evicted to make room for another has the runs of its tasks waiting for input canceled, and its conversation goes on', async () => {
    const a2a = await A2aServer.start(gateway, { port: 0, logger: silentLogger(), maxAgents: 1 })
    try {
      const c1 = await new ClientFactory().createFromUrl(a2a.clientUrl(w1.agentId))
      const blocked = asTask(await c1.sendMessage(send(APPROVE, { n: 1 }, 'ctx-dropped-evict')))
      expect(blocked.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
      const runId = runIdOf(blocked)
      cleanup.push(runId)
      // a client reads another agent's card: w1's handler (one task, waiting for input) makes room
      const res = await fetch(a2a.agentCardUrl(w2.agentId), { signal: AbortSignal.timeout(10_000) })
      expect(res.status).toBe(200)
      expect(a2a.stats.evicted).toBe(1)
      await until(async () => (await gateway.getRun(runId)).state !== 'blocked', 'the dropped task\'s run to end')
      const run = await gateway.getRun(runId)
      expect(run.state).toBe('failed')
      expect(run.failure).toMatchObject({ code: 'CANCELED' })
      expect(run.failure?.message).toContain('A2A task was dropped')
      // the conversation is not stuck behind a run no one can reach: its next turn is taken
      const next = asTask(await c1.sendMessage(send(APPROVE, { n: 2 }, 'ctx-dropped-evict')))
      expect(next.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
      cleanup.push(runIdOf(next))
    } finally {
      await a2a.close()
    }
  })

  it('card lookups of agents that do not exist push no served agent out', async () => {
    const a2a = await A2aServer.start(gateway, { port: 0, logger: silentLogger(), maxAgents: 2 })
    try {
      const c1 = await new ClientFactory().createFromUrl(a2a.clientUrl(w1.agentId))
      const blocked = asTask(await c1.sendMessage(send(APPROVE, { n: 1 }, 'ctx-dropped-lookups')))
      cleanup.push(runIdOf(blocked))
      // several at once: a lookup under way holds no place among the agents served
      const ids = await Promise.all([0, 1, 2, 3].map(async () => peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()))
      const codes = await Promise.all(ids.map(async (id) => (await fetch(a2a.agentCardUrl(id), { signal: AbortSignal.timeout(30_000) })).status))
      expect(codes).toEqual([404, 404, 404, 404])
      expect(a2a.stats.evicted).toBe(0)
      const got = await c1.getTask({ tenant: '', id: blocked.id })
      expect(got.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
      expect((await gateway.getRun(runIdOf(blocked))).state).toBe('blocked')
    } finally {
      await a2a.close()
    }
  })

  it('an agent whose tasks are all open refuses a new task rather than drop one (A2A_TASKS_MAX_PER_AGENT)', async () => {
    const a2a = await A2aServer.start(gateway, { port: 0, logger: silentLogger(), maxTasksPerAgent: 1 })
    try {
      const c1 = await new ClientFactory().createFromUrl(a2a.clientUrl(w1.agentId))
      const blocked = asTask(await c1.sendMessage(send(APPROVE, { n: 1 }, 'ctx-dropped-count-1')))
      cleanup.push(runIdOf(blocked))
      const refused = await c1.sendMessage(send(APPROVE, { n: 2 }, 'ctx-dropped-count-2')).then(() => undefined, (err: unknown) => err as Error)
      expect(refused?.message).toContain('A2A_TASKS_MAX_PER_AGENT')
      expect(refused?.message).toContain('DELEGATION_REFUSED')
      const got = await c1.getTask({ tenant: '', id: blocked.id })
      expect(got.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    } finally {
      await a2a.close()
    }
  })

  it('an open task the store drops past its count is handed on with the drop, so its run can be ended', async () => {
    const dropped: Array<{ id: string, open: Task | undefined }> = []
    const store = new BoundedTaskStore(1, (id, open) => { dropped.push({ id, open }) })
    const task = (id: string, state: TaskState): Task => ({ id, contextId: 'c', status: { state, message: undefined, timestamp: new Date().toISOString() }, artifacts: [], history: [], metadata: undefined })
    const ctx = {} as never
    expect(store.fullUnder()).toBeUndefined()
    await store.save(task('t1', TaskState.TASK_STATE_INPUT_REQUIRED), ctx)
    expect(store.fullUnder()).toMatchObject({ bound: 'A2A_TASKS_MAX_PER_AGENT', limit: 1 })
    // two new tasks passed the check at once: the open one goes, and says so
    await store.save(task('t2', TaskState.TASK_STATE_WORKING), ctx)
    expect(dropped.map(d => d.id)).toEqual(['t1'])
    expect(dropped[0]?.open?.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    await store.save(task('t2', TaskState.TASK_STATE_COMPLETED), ctx)
    expect(store.fullUnder()).toBeUndefined()
    await store.save(task('t3', TaskState.TASK_STATE_WORKING), ctx)
    expect(dropped[1]).toEqual({ id: 't2', open: undefined })
  })
})
