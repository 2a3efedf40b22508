/**
 * One A2A message sent twice at once (a client retrying a slow send: the
 * same messageId, no contextId): the second send is refused while the first
 * is under way (already being processed) before it reserves a place or
 * makes a mesh call, so it starts no run, and the first send's place under
 * A2A_TASKS_MAX_PER_AGENT is given back once its task is saved: the agent
 * takes as many new tasks afterwards as before.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState, type Task } from '@a2a-js/sdk'
import { ClientFactory } from '@a2a-js/sdk/client'
import { A2aServer } from '../src/a2a/server.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { asTask, handlerOf, send } from './fixtures/a2a-messages.ts'

const ECHO = { capability_id: 'cap:echo', version: '1.0.0' }

describe('A2A inbound: one message sent twice at once', () => {
  let nodes: MeshNode[] = []
  let worker: MeshNode, gateway: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    ;[worker, gateway] = nodes as [MeshNode, MeshNode]
    worker.runs.handle(ECHO, async (ctx) => ({ echo: ctx.input }))
    await worker.publishCard({ name: 'worker', capabilities: [ECHO] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('the second send is refused and starts no run; the first gives its place back', async () => {
    const a2a = await A2aServer.start(gateway, { port: 0, logger: silentLogger(), maxTasksPerAgent: 2 })
    const delegate = gateway.delegate.bind(gateway)
    const client = await new ClientFactory().createFromUrl(a2a.clientUrl(worker.agentId))
    const gates: Array<PromiseWithResolvers<void>> = []
    /** Hold every delegation until `gate` opens; returns the gate and a count of the delegations made. */
    const hold = (): { gate: PromiseWithResolvers<void>, made: () => number } => {
      let n = 0
      const gate = Promise.withResolvers<void>()
      gates.push(gate)
      gateway.delegate = async (req, opts) => {
        n++
        await gate.promise
        return await delegate(req, opts)
      }
      return { gate, made: () => n }
    }
    /** Send each request at once; each outcome is its task or its error. */
    const sendAll = (reqs: Array<ReturnType<typeof send>>): { outcomes: Array<Task | Error | undefined>, done: Promise<void> } => {
      const outcomes: Array<Task | Error | undefined> = reqs.map(() => undefined)
      const done = Promise.all(reqs.map(async (req, i) => {
        outcomes[i] = await client.sendMessage(req).then(asTask, (err: unknown) => err as Error)
      })).then(() => undefined)
      return { outcomes, done }
    }
    const errors = (outcomes: Array<Task | Error | undefined>): Error[] => outcomes.filter((o): o is Error => o instanceof Error)
    const tasks = (outcomes: Array<Task | Error | undefined>): Task[] => outcomes.filter((o): o is Task => o !== undefined && !(o instanceof Error))
    try {
      // the agent is served (its handler made) before the two sends
      expect(asTask(await client.sendMessage(send(ECHO, { n: 0 }, 'ctx-dup-first'))).status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
      const h = await handlerOf(a2a, worker.agentId)

      // one message, sent twice at once: the delegation is held until one send is delegating and the other answered
      const twice = hold()
      const retry = send(ECHO, { n: 1 })
      const dup = sendAll([retry, retry])
      await until(() => twice.made() + errors(dup.outcomes).length >= 2, 'one send delegating, the other answered')
      expect(twice.made()).toBe(1)
      expect(errors(dup.outcomes)).toHaveLength(1)
      expect(errors(dup.outcomes)[0]?.message).toContain(`message ${retry.message.messageId} is already being processed`)
      twice.gate.resolve()
      await dup.done
      expect(tasks(dup.outcomes).map(t => t.status?.state)).toEqual([TaskState.TASK_STATE_COMPLETED])
      // the refused send started no run
      expect(twice.made()).toBe(1)
      gateway.delegate = delegate
      await until(() => h.sending === 0, 'both sends over')

      // no task is open: both places under the count are free, so two new tasks at once are both admitted
      const both = hold()
      const two = sendAll([send(ECHO, { n: 2 }), send(ECHO, { n: 3 })])
      await until(() => both.made() + errors(two.outcomes).length >= 2, 'each new task delegating or refused')
      both.gate.resolve()
      await two.done
      expect(errors(two.outcomes).map(e => e.message)).toEqual([])
      expect(tasks(two.outcomes).map(t => t.status?.state)).toEqual([TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_COMPLETED])
      expect(h.store.fullUnder()).toBeUndefined()
    } finally {
      // a delegation still held would keep close() waiting for it
      for (const g of gates) g.resolve()
      gateway.delegate = delegate
      await a2a.close()
    }
  })
})
