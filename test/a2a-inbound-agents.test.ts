/**
 * The inbound A2A server serves a bounded number of mesh agents. Making room
 * for another drops the least recently used agent with no open task; an
 * agent with a task still working (or waiting for input) is never dropped,
 * so a client reading other agents' cards cannot push out another client's
 * task. Before, the least recently used entry went whatever it held, and its
 * tasks with it. Real nodes; the A2A side is @a2a-js/sdk's client.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Role, TaskState } from '@a2a-js/sdk'
import type { Message, Part, Task } from '@a2a-js/sdk'
import { ClientFactory } from '@a2a-js/sdk/client'
import { PART_DELEGATE } from '../src/a2a/constants.ts'
import { MAX_CORRELATION_TOPICS } from '../src/constants.ts'
import type { EventSubscription } from '../src/events/subscription.ts'
import { A2aServer } from '../src/a2a/server.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const WAIT = { capability_id: 'cap:wait-for-abort', version: '1.0.0' }
const TALK = { capability_id: 'cap:talkative', version: '1.0.0' }
const ASK = { capability_id: 'cap:asks-a-human', version: '1.0.0' }
const TALK_STEPS = 200

function delegateMessage (capability = WAIT): Message {
  const part: Part = { content: { $case: 'data', value: { type: PART_DELEGATE, capability, input: {} } }, metadata: undefined, filename: '', mediaType: 'application/json' }
  return { messageId: crypto.randomUUID(), contextId: '', taskId: '', role: Role.ROLE_USER, parts: [part], metadata: undefined, extensions: [], referenceTaskIds: [] }
}

describe('the agents an A2A server serves at once', () => {
  let nodes: MeshNode[] = []
  let gateway: MeshNode, busy: MeshNode, idle1: MeshNode, idle2: MeshNode
  let a2a: A2aServer
  let started = 0
  const runs: string[] = []

  beforeAll(async () => {
    nodes = await startMesh(4)
    ;[gateway, busy, idle1, idle2] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    busy.runs.handle(WAIT, async (ctx) => {
      started++
      runs.push(ctx.run.run_id)
      await new Promise<void>(resolve => { ctx.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
      return {}
    })
    busy.runs.handle(ASK, async (ctx) => {
      const resolution = await ctx.block('a human decides', `cp-${ctx.run.run_id.slice(-8)}`)
      return { resolution }
    })
    busy.runs.handle(TALK, async (ctx) => {
      for (let i = 0; i < TALK_STEPS; i++) await ctx.progress({ step: i, text: 't'.repeat(24 * 1024) })
      return { said: TALK_STEPS }
    })
    for (const [n, name] of [[busy, 'busy'], [idle1, 'idle-1'], [idle2, 'idle-2']] as const) {
      await n.publishCard({ name, capabilities: n === busy ? [WAIT, TALK, ASK] : [{ capability_id: 'cap:nothing', version: '1.0.0' }] })
    }
    a2a = await A2aServer.start(gateway, { port: 0, logger: silentLogger(), maxAgents: 2, maxUnreadBytes: 64 * 1024 })
  })
  afterAll(async () => {
    await a2a?.close()
    await stopAll(nodes)
  })

  it('reading other agents\' cards drops an idle agent, never one with a working task; with no idle one, a new agent is refused', async () => {
    const client = await new ClientFactory().createFromUrl(a2a.clientUrl(busy.agentId))
    const sent = await client.sendMessage({ tenant: '', message: delegateMessage(), configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: true }, metadata: undefined })
    const task = sent as Task
    expect(task.status?.state).toBe(TaskState.TASK_STATE_WORKING)
    await until(() => started === 1, 'the run to start')

    // busy's entry is now the least recently used; two more agents' cards are read
    for (const n of [idle1, idle2]) {
      const res = await fetch(a2a.agentCardUrl(n.agentId))
      expect(res.status).toBe(200)
    }
    expect(a2a.stats.evicted).toBe(1)
    // the working task is still served
    expect((await client.getTask({ tenant: '', id: task.id })).status?.state).toBe(TaskState.TASK_STATE_WORKING)

    // and it is not dropped however many other agents are asked for
    expect((await fetch(a2a.agentCardUrl(idle1.agentId))).status).toBe(200)
    expect(a2a.stats.evicted).toBe(2)
    expect((await client.getTask({ tenant: '', id: task.id })).status?.state).toBe(TaskState.TASK_STATE_WORKING)
  })

  it('with every agent holding an open task, another agent is refused and the open tasks stay', async () => {
    const one = await A2aServer.start(gateway, { port: 0, logger: silentLogger(), maxAgents: 1 })
    try {
      const client = await new ClientFactory().createFromUrl(one.clientUrl(busy.agentId))
      const task = await client.sendMessage({ tenant: '', message: delegateMessage(), configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: true }, metadata: undefined }) as Task
      expect(task.status?.state).toBe(TaskState.TASK_STATE_WORKING)
      const refused = await fetch(one.agentCardUrl(idle1.agentId))
      expect(refused.status).toBe(503) // at capacity (DELEGATION_REFUSED): unavailable, not "not found"
      expect(await refused.text()).toContain('open tasks already')
      expect(one.stats.evicted).toBe(0)
      expect((await client.getTask({ tenant: '', id: task.id })).status?.state).toBe(TaskState.TASK_STATE_WORKING)
    } finally {
      await one.close()
    }
  })

  it('a task whose run the server cannot follow fails, and its run is canceled rather than left working unseen', async () => {
    // the gateway follows as many correlations as it may, each for a subscriber of its own
    const subs: EventSubscription[] = []
    try {
      for (let i = 0; subs.length < MAX_CORRELATION_TOPICS; i++) {
        try {
          subs.push(await gateway.events.subscribe(`topics-full-${i}`))
        } catch {
          break
        }
      }
      expect(gateway.events.topics()).toHaveLength(MAX_CORRELATION_TOPICS)
      const client = await new ClientFactory().createFromUrl(a2a.clientUrl(busy.agentId))
      const before = runs.length
      const failed = await client.sendMessage({ tenant: '', message: delegateMessage(), configuration: undefined, metadata: undefined }) as Task
      expect(failed.status?.state).toBe(TaskState.TASK_STATE_FAILED)
      expect(runs.length).toBe(before + 1)
      const runId = runs.at(-1)!
      await until(async () => (await busy.runs.store.get(runId))?.state === 'failed', 'the run to be canceled')
      expect((await busy.runs.store.get(runId))?.failure?.code).toBe('CANCELED')
    } finally {
      for (const sub of subs) sub.close()
    }
  })

  it('cuts off a stream client that stopped reading, and goes on serving', async () => {
    const client = await new ClientFactory().createFromUrl(a2a.clientUrl(busy.agentId))
    const stream = client.sendMessageStream({ tenant: '', message: delegateMessage(TALK), configuration: undefined, metadata: undefined })
    const first = await stream.next()
    expect(first.done).toBe(false)
    // the client reads nothing more while the run says about 4.8 MB
    await until(() => a2a.stats.cutOff === 1, 'the client to be cut off', 60_000)
    const task = (first.value as { payload?: { $case: string, value: Task } }).payload?.value
    expect(task?.id).toBeDefined()
    await until(async () => (await client.getTask({ tenant: '', id: task!.id })).status?.state === TaskState.TASK_STATE_COMPLETED, 'the task to complete', 60_000)
    await stream.return(undefined)
  })

  it('with no idle agent, one whose open tasks only wait for input goes before a new agent is refused', async () => {
    const one = await A2aServer.start(gateway, { port: 0, logger: silentLogger(), maxAgents: 1 })
    try {
      const client = await new ClientFactory().createFromUrl(one.clientUrl(busy.agentId))
      const task = await client.sendMessage({ tenant: '', message: delegateMessage(ASK), configuration: undefined, metadata: undefined }) as Task
      expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
      expect((await fetch(one.agentCardUrl(idle1.agentId))).status).toBe(200)
      expect(one.stats.evicted).toBe(1)
    } finally {
      await one.close()
    }
  })
})
