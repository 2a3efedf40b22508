/**
 * A SendMessage's referenceTaskIds: the SDK loads a copy of the task for each
 * one (repeats included) before the executor runs, and the mesh reads none of
 * them, so one small request naming a large task thousands of times would
 * make the node hold thousands of copies. A message naming more than
 * A2A_REFERENCE_TASKS_MAX is refused (-32602) before any load or mesh call,
 * a new task and a resume alike; one within the bound goes on as usual.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import { ClientFactory, type Client } from '@a2a-js/sdk/client'
import { RequestMalformedError } from '@a2a-js/sdk/errors'
import type { MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { A2aServer } from '../src/a2a/server.ts'
import { A2A_REFERENCE_TASKS_MAX, PART_RESUME } from '../src/a2a/constants.ts'
import { startMesh, stopAll } from './helpers.ts'
import { asTask, data, handlerOf, runIdOf, send, userMessage } from './fixtures/a2a-messages.ts'

const ECHO = { capability_id: 'cap:echo', version: '1.0.0' }
const APPROVE = { capability_id: 'cap:approve', version: '1.0.0' }

describe('A2A inbound: referenceTaskIds are bounded', () => {
  let nodes: MeshNode[] = []
  let a2a: A2aServer
  let client: Client
  let runsStarted = 0
  /** Task loads of the worker's agent's store, from the test's first request on. */
  let loads = 0

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    const [w, gw] = nodes as [MeshNode, MeshNode]
    w.runs.handle(ECHO, async (ctx) => { runsStarted++; return { echo: ctx.input } })
    w.runs.handle(APPROVE, async (ctx) => { runsStarted++; return { ok: (await ctx.block('decide', `cp-${ctx.run.run_id}`)).ok } })
    await w.publishCard({ name: 'w', capabilities: [ECHO, APPROVE] })
    await gw.publishCard({ name: 'gw', capabilities: [] })
    a2a = await A2aServer.start(gw, { port: 0, logger: silentLogger() })
    client = await new ClientFactory().createFromUrl(a2a.clientUrl(w.agentId))
    // the agent is served once a request reached it: count its store's loads from here on
    await client.sendMessage(send(ECHO, { warm: true }, 'ctx-refs-warm'))
    const store = (await handlerOf(a2a, w.agentId)).store
    const load = store.load.bind(store)
    store.load = async (...args: Parameters<typeof load>) => { loads++; return await load(...args) }
  })
  afterAll(async () => {
    await a2a?.close()
    await stopAll(nodes)
  })

  it('a new task naming more than A2A_REFERENCE_TASKS_MAX references is refused before any load or run', async () => {
    const ref = asTask(await client.sendMessage(send(ECHO, { s: 'referenced' }, 'ctx-refs-ref')))
    const req = send(ECHO, { s: 'many refs' }, 'ctx-refs-many')
    req.message.referenceTaskIds = Array.from({ length: A2A_REFERENCE_TASKS_MAX + 1 }, () => ref.id)
    const [runsBefore, loadsBefore] = [runsStarted, loads]
    const err = await client.sendMessage(req).then(() => undefined, (e: Error) => e)
    expect(err?.message).toContain('A2A_REFERENCE_TASKS_MAX')
    expect(err).toBeInstanceOf(RequestMalformedError)
    expect(runsStarted).toBe(runsBefore)
    expect(loads).toBe(loadsBefore)
    // the context took no turn: a message within the bound is accepted in it
    const ok = send(ECHO, { s: 'few refs' }, 'ctx-refs-many')
    ok.message.referenceTaskIds = Array.from({ length: A2A_REFERENCE_TASKS_MAX }, () => ref.id)
    expect(asTask(await client.sendMessage(ok)).status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
  })

  it('a resume naming more than A2A_REFERENCE_TASKS_MAX references is refused, and the task stays resumable', async () => {
    const t = asTask(await client.sendMessage(send(APPROVE, {}, 'ctx-refs-resume')))
    expect(t.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const resume = (refs: string[]): Parameters<Client['sendMessage']>[0] => {
      const message = userMessage([data(PART_RESUME, { resolution: { ok: true } })], { taskId: t.id })
      message.referenceTaskIds = refs
      return { tenant: '', message, configuration: undefined, metadata: undefined }
    }
    const loadsBefore = loads
    const err = await client.sendMessage(resume(Array.from({ length: A2A_REFERENCE_TASKS_MAX + 1 }, () => t.id))).then(() => undefined, (e: Error) => e)
    expect(err?.message).toContain('A2A_REFERENCE_TASKS_MAX')
    expect(err).toBeInstanceOf(RequestMalformedError)
    expect(loads).toBe(loadsBefore)
    expect((await nodes[0]!.runs.store.get(runIdOf(t)))?.state).toBe('blocked')
    expect((await client.getTask({ tenant: '', id: t.id })).status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const done = asTask(await client.sendMessage(resume([t.id])))
    expect(done.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
  })
})
