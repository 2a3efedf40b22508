/**
 * At an agent's task bound (A2A_TASKS_MAX_PER_AGENT) new tasks push out
 * finished ones, least recently written first, and never a task waiting for
 * input: new tasks sent at once that together would push one out are
 * refused (DELEGATION_REFUSED, reason capacity) before their runs start,
 * and the waiting task and its blocked run stay for the client to resume.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState, type Task } from '@a2a-js/sdk'
import { ClientFactory } from '@a2a-js/sdk/client'
import { A2aServer } from '../src/a2a/server.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { asTask, runIdOf, send } from './fixtures/a2a-messages.ts'

const ECHO = { capability_id: 'cap:echo', version: '1.0.0' }
const APPROVE = { capability_id: 'cap:approve', version: '1.0.0' }

describe('A2A inbound: the task bound and tasks waiting for input', () => {
  let nodes: MeshNode[] = []
  let worker: MeshNode, gateway: MeshNode
  const blocked: string[] = []

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    ;[worker, gateway] = nodes as [MeshNode, MeshNode]
    worker.runs.handle(ECHO, async (ctx) => ({ echo: ctx.input }))
    worker.runs.handle(APPROVE, async (ctx) => ({ r: await ctx.block('needs a human', `cp-${ctx.run.run_id}`) }))
    await worker.publishCard({ name: 'worker', capabilities: [ECHO, APPROVE] })
  })
  afterAll(async () => {
    for (const runId of blocked) {
      if ((await gateway.getRun(runId)).state === 'blocked') await gateway.cancel(runId, 'test cleanup')
    }
    await stopAll(nodes)
  })

  it('finished tasks make room oldest first; new tasks that would push out a waiting one are refused', async () => {
    const a2a = await A2aServer.start(gateway, { port: 0, logger: silentLogger(), maxTasksPerAgent: 3 })
    const delegate = gateway.delegate.bind(gateway)
    try {
      const client = await new ClientFactory().createFromUrl(a2a.clientUrl(worker.agentId))
      const older = asTask(await client.sendMessage(send(ECHO, { n: 1 }, 'ctx-bound-done-1')))
      const newer = asTask(await client.sendMessage(send(ECHO, { n: 2 }, 'ctx-bound-done-2')))
      const waiting = asTask(await client.sendMessage(send(APPROVE, { n: 3 }, 'ctx-bound-waiting')))
      expect(waiting.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
      blocked.push(runIdOf(waiting))

      // a new task at the bound pushes out the least recently written finished task
      const first = asTask(await client.sendMessage(send(APPROVE, { n: 4 }, 'ctx-bound-first')))
      blocked.push(runIdOf(first))
      await expect(client.getTask({ tenant: '', id: older.id })).rejects.toThrow(/not found/i)
      expect((await client.getTask({ tenant: '', id: newer.id })).status?.state).toBe(TaskState.TASK_STATE_COMPLETED)

      // two new tasks at once, with room for one: their delegations are held until each is delegating or refused
      let delegating = 0
      const gate = Promise.withResolvers<void>()
      gateway.delegate = async (req, opts) => {
        delegating++
        await gate.promise
        return await delegate(req, opts)
      }
      const outcomes: Array<Task | Error | undefined> = [undefined, undefined]
      const sends = [0, 1].map(async (i) => {
        outcomes[i] = await client.sendMessage(send(APPROVE, { n: 10 + i }, `ctx-bound-new-${i}`)).then(asTask, (err: unknown) => err as Error)
      })
      await until(() => delegating + outcomes.filter(o => o instanceof Error).length >= 2, 'each new task delegating or refused')
      gate.resolve()
      await Promise.all(sends)

      const admitted = outcomes.filter((o): o is Task => o !== undefined && !(o instanceof Error))
      const refused = outcomes.filter((o): o is Error => o instanceof Error)
      for (const t of admitted) blocked.push(runIdOf(t))
      expect(admitted.map(t => t.status?.state)).toEqual([TaskState.TASK_STATE_INPUT_REQUIRED])
      expect(refused).toHaveLength(1)
      expect(refused[0]?.message).toContain('DELEGATION_REFUSED')
      expect(refused[0]?.message).toContain('A2A_TASKS_MAX_PER_AGENT')
      // the refused task started no run
      expect(delegating).toBe(1)

      // the last finished task made the room, and the waiting ones are still their clients' to resume
      await expect(client.getTask({ tenant: '', id: newer.id })).rejects.toThrow(/not found/i)
      for (const t of [waiting, first]) {
        expect((await client.getTask({ tenant: '', id: t.id })).status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
        expect((await gateway.getRun(runIdOf(t))).state).toBe('blocked')
      }
    } finally {
      gateway.delegate = delegate
      await a2a.close()
    }
  })
})
