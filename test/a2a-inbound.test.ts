/**
 * Mesh agents as A2A v1.0 agents, driven with the official @a2a-js/sdk
 * client only: send, stream, input-required then resume, cancel, get, list,
 * and bad requests that get A2A's JSON-RPC errors.
 */
import { getEventListeners } from 'node:events'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Role, TaskState } from '@a2a-js/sdk'
import type { StreamResponse } from '@a2a-js/sdk'
import { ClientFactory, ClientFactoryOptions, type Client } from '@a2a-js/sdk/client'
import type { MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { A2aServer } from '../src/a2a/server.ts'
import { A2A_BODY_MAX_BYTES, A2A_MESH_EXTENSION_URI, PART_CHECKPOINT, PART_FAILURE, PART_OUTPUT, PART_RESUME } from '../src/a2a/constants.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { asTask, data, partData, send, userMessage } from './fixtures/a2a-messages.ts'

const ECHO = { capability_id: 'cap:echo', version: '1.0.0' }
const APPROVE = { capability_id: 'cap:approve', version: '1.0.0' }
const WAIT = { capability_id: 'cap:wait', version: '1.0.0' }

describe('A2A inbound: mesh agents behind an A2A v1.0 server', () => {
  let nodes: MeshNode[] = []
  let worker: MeshNode, gateway: MeshNode
  let a2a: A2aServer
  let client: Client
  const waiting = new Set<string>()

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    ;[worker, gateway] = nodes as [MeshNode, MeshNode]
    worker.runs.handle(ECHO, async (ctx) => {
      await ctx.progress({ step: 'echoing' })
      return { echo: ctx.input }
    })
    worker.runs.handle(APPROVE, async (ctx) => {
      const resolution = await ctx.block('needs a human yes', `cp-${ctx.run.correlation_id}`)
      return { approved: resolution.approved, input: ctx.input }
    })
    worker.runs.handle(WAIT, async (ctx) => {
      waiting.add(ctx.run.run_id)
      await new Promise<void>(resolve => { ctx.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
      return {}
    })
    await worker.publishCard({ name: 'worker', description: 'does three things', capabilities: [ECHO, APPROVE, WAIT], tags: ['test'] })
    await gateway.publishCard({ name: 'gateway', capabilities: [] })
    a2a = await A2aServer.start(gateway, { port: 0, logger: silentLogger() })
    client = await new ClientFactory().createFromUrl(a2a.clientUrl(worker.agentId))
  })
  afterAll(async () => {
    await a2a?.close()
    await stopAll(nodes)
  })

  it('serves an A2A card per mesh agent, derived from its mesh card, and the local agent\'s at the root', async () => {
    const card = await client.getAgentCard()
    expect(card.name).toBe('worker')
    expect(card.skills.map(s => s.id).sort()).toEqual(['cap:approve@1.0.0', 'cap:echo@1.0.0', 'cap:wait@1.0.0'])
    expect(card.capabilities?.extensions.map(e => e.uri)).toContain(A2A_MESH_EXTENSION_URI)
    expect(card.capabilities?.streaming).toBe(true)
    expect(Object.keys(card.securitySchemes).length).toBeGreaterThan(0)
    expect(card.supportedInterfaces.map(i => i.protocolBinding)).toEqual(['JSONRPC', 'HTTP+JSON'])
    const root = await (await fetch(`${a2a.url}/.well-known/agent-card.json`, { signal: AbortSignal.timeout(5000) })).json() as { name: string, supportedInterfaces: Array<{ url: string }> }
    expect(root.name).toBe('gateway')
    expect(root.supportedInterfaces[0]?.url).toContain(gateway.agentId)
  })

  it('SendMessage delegates; the task completes with the output as a DataPart artifact and names the run', async () => {
    const task = asTask(await client.sendMessage(send(ECHO, { hello: 'mesh' }, 'corr-send-1')))
    expect(task.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(task.contextId).toBe('corr-send-1')
    const out = partData(task.artifacts[0]?.parts, PART_OUTPUT)
    expect(out?.output).toEqual({ echo: { hello: 'mesh' } })
    const meta = task.metadata?.[A2A_MESH_EXTENSION_URI] as { run_id: string, correlation_id: string }
    expect(meta.correlation_id).toBe('corr-send-1')
    const run = await gateway.getRun(meta.run_id)
    expect(run.state).toBe('completed')
    expect(run.correlation_id).toBe('corr-send-1')
  })

  it('the HTTP+JSON binding does the same', async () => {
    const rest = await new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { preferredTransports: ['HTTP+JSON'] }))
      .createFromUrl(a2a.clientUrl(worker.agentId))
    expect(rest.transport.protocolName).toBe('HTTP+JSON')
    const task = asTask(await rest.sendMessage(send(ECHO, { via: 'rest' }, 'corr-rest')))
    expect(task.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(partData((await rest.getTask({ tenant: '', id: task.id })).artifacts[0]?.parts, PART_OUTPUT)?.output).toEqual({ echo: { via: 'rest' } })
  })

  it('SendStreamingMessage streams the run\'s events as status and artifact updates', async () => {
    const seen: StreamResponse[] = []
    for await (const ev of client.sendMessageStream(send(ECHO, { n: 2 }))) seen.push(ev)
    const kinds = seen.map(e => e.payload?.$case)
    expect(kinds[0]).toBe('task')
    const states = seen.flatMap(e => e.payload?.$case === 'statusUpdate' ? [e.payload.value.status?.state] : [])
    expect(states).toContain(TaskState.TASK_STATE_WORKING)
    expect(states.at(-1)).toBe(TaskState.TASK_STATE_COMPLETED)
    const art = seen.find(e => e.payload?.$case === 'artifactUpdate')
    expect(art?.payload?.$case === 'artifactUpdate' && partData(art.payload.value.artifact?.parts, PART_OUTPUT)?.output).toEqual({ echo: { n: 2 } })
  })

  it('run.blocked is INPUT_REQUIRED with the checkpoint; a resolution on the task resumes it', async () => {
    const blocked = asTask(await client.sendMessage(send(APPROVE, { doc: 7 }, 'corr-approve')))
    expect(blocked.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const cp = partData(blocked.status?.message?.parts, PART_CHECKPOINT)
    expect(cp).toMatchObject({ checkpoint_id: 'cp-corr-approve', reason: 'needs a human yes' })
    expect(blocked.status?.message?.role).toBe(Role.ROLE_AGENT)

    // resuming through the stream: updates until the end
    const seen: StreamResponse[] = []
    const resume = { tenant: '', message: userMessage([data(PART_RESUME, { resolution: { approved: true } })], { taskId: blocked.id, contextId: blocked.contextId }), configuration: undefined, metadata: undefined }
    for await (const ev of client.sendMessageStream(resume)) seen.push(ev)
    const last = seen.at(-1)
    expect(last?.payload?.$case === 'statusUpdate' && last.payload.value.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    const got = await client.getTask({ tenant: '', id: blocked.id })
    expect(got.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(partData(got.artifacts[0]?.parts, PART_OUTPUT)?.output).toEqual({ approved: true, input: { doc: 7 } })
    expect(got.history.length).toBeGreaterThanOrEqual(2)
  })

  it('follows no task that waits for input (a watch stays on its run, counted apart): one its client never resumes keeps no follower', async () => {
    // the handler of the gateway's agent, as the server made it (its entries are private)
    const handler = async (): Promise<{ following: number }> => {
      const entries = (a2a as unknown as { entries: Map<string, Promise<{ handler: { following: number } }>> }).entries
      return (await entries.get(worker.agentId)!).handler
    }
    // an earlier case's follower may still be ending: counted from none
    await until(async () => (await handler()).following === 0, 'the earlier cases\' followers to end')
    const before = (await handler()).following
    for (let i = 0; i < 3; i++) {
      const blocked = asTask(await client.sendMessage(send(APPROVE, { doc: 100 + i }, `corr-abandoned-${i}`)))
      expect(blocked.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    }
    await until(async () => (await handler()).following === before, 'the followers of the blocked tasks to end')
    expect((await handler()).following).toBe(0)
  })

  it('CancelTask cancels the run; SubscribeToTask sees it end', async () => {
    // the follower of the task ends with the cancel: its listener on the handler's stop signal goes (it stayed, one per cancel)
    const entries = (a2a as unknown as { entries: Map<string, Promise<{ handler: { stopping: AbortController } }>> }).entries
    const stopSignal = (await entries.get(worker.agentId)!).handler.stopping.signal
    const listening = (): number => getEventListeners(stopSignal, 'abort').length
    const listeners = listening()
    const params = { ...send(WAIT, {}), configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: true } }
    const task = asTask(await client.sendMessage(params))
    const runId = (task.metadata?.[A2A_MESH_EXTENSION_URI] as { run_id: string }).run_id
    await until(() => waiting.has(runId), 'the worker to start the run')
    // subscribed (its first event, the task as it is, has arrived) before the cancel
    const stream = client.resubscribeTask({ tenant: '', id: task.id })
    const first = await stream.next()
    expect(first.done).toBe(false)
    const subscribed = (async () => {
      const seen: StreamResponse[] = first.done === true ? [] : [first.value]
      for await (const ev of stream) seen.push(ev)
      return seen
    })()
    const canceled = await client.cancelTask({ tenant: '', id: task.id, metadata: undefined })
    expect(canceled.status?.state).toBe(TaskState.TASK_STATE_CANCELED)
    expect(partData(canceled.status?.message?.parts, PART_FAILURE)?.code).toBe('CANCELED')
    const run = await gateway.getRun(runId)
    expect(run.state).toBe('failed')
    expect(run.failure?.code).toBe('CANCELED')
    expect((await client.getTask({ tenant: '', id: task.id })).status?.state).toBe(TaskState.TASK_STATE_CANCELED)
    const streamed = await subscribed
    const lastState = streamed.flatMap(e => e.payload?.$case === 'statusUpdate' ? [e.payload.value.status?.state] : e.payload?.$case === 'task' ? [e.payload.value.status?.state] : []).at(-1)
    expect(lastState).toBe(TaskState.TASK_STATE_CANCELED)
    // a final task cannot be canceled again
    await expect(client.cancelTask({ tenant: '', id: task.id, metadata: undefined })).resolves.toMatchObject({ status: { state: TaskState.TASK_STATE_CANCELED } })
    await until(() => listening() === listeners, 'the canceled task\'s follower to end')
  })

  it('ListTasks pages through the agent\'s tasks and filters by context', async () => {
    for (let i = 0; i < 3; i++) await client.sendMessage(send(ECHO, { i }, 'corr-list'))
    const first = await client.listTasks({ tenant: '', contextId: 'corr-list', status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 2, pageToken: '', statusTimestampAfter: undefined, includeArtifacts: true })
    expect(first.tasks).toHaveLength(2)
    expect(first.totalSize).toBe(3)
    expect(first.nextPageToken).not.toBe('')
    const second = await client.listTasks({ tenant: '', contextId: 'corr-list', status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 2, pageToken: first.nextPageToken, statusTimestampAfter: undefined, includeArtifacts: true })
    expect(second.tasks).toHaveLength(1)
    expect(second.nextPageToken).toBe('')
    const ids = new Set([...first.tasks, ...second.tasks].map(t => t.id))
    expect(ids.size).toBe(3)
    const all = await client.listTasks({ tenant: '', contextId: '', status: TaskState.TASK_STATE_COMPLETED, pageSize: 100, pageToken: '', statusTimestampAfter: undefined })
    expect(all.tasks.every(t => t.status?.state === TaskState.TASK_STATE_COMPLETED)).toBe(true)
    expect(all.tasks.length).toBeGreaterThanOrEqual(5)
  })

  it('a served agent\'s newer mesh card replaces its A2A card, and its tasks stay', async () => {
    const eager = await A2aServer.start(gateway, { port: 0, logger: silentLogger(), cardRefreshMs: 0 })
    try {
      const c = await new ClientFactory().createFromUrl(eager.clientUrl(worker.agentId))
      const before = asTask(await c.sendMessage(send(ECHO, { v: 1 })))
      const EXTRA = { capability_id: 'cap:extra', version: '1.0.0' }
      const next = await worker.publishCard({ name: 'worker', description: 'does four things', capabilities: [ECHO, APPROVE, WAIT, EXTRA], tags: ['test'] })
      const cardUrl = eager.agentCardUrl(worker.agentId)
      const fetched = await (await fetch(cardUrl, { signal: AbortSignal.timeout(5000) })).json() as { version: string, skills: Array<{ id: string }> }
      expect(fetched.version).toBe(String(next.seq))
      expect(fetched.skills.map(s => s.id)).toContain('cap:extra@1.0.0')
      expect((await c.getTask({ tenant: '', id: before.id })).status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    } finally {
      await eager.close()
    }
  })

  it('bad requests get A2A errors, and the server goes on', async () => {
    // an agent with three capabilities needs the typed part to pick one
    const text = { tenant: '', message: userMessage([{ content: { $case: 'text', value: 'hi' }, metadata: undefined, filename: '', mediaType: 'text/plain' }]), configuration: undefined, metadata: undefined }
    await expect(client.sendMessage(text)).rejects.toThrow(/capabilit/)
    await expect(client.sendMessage(send({ capability_id: 'cap:nope', version: '1.0.0' }, {}))).rejects.toThrow(/CAPABILITY_NOT_SUPPORTED/)
    await expect(client.getTask({ tenant: '', id: 'no-such-task' })).rejects.toThrow()
    await expect(client.sendMessage(send(ECHO, {}, 'bad context id!'))).rejects.toThrow(/contextId/)
    // a resume on a task that is not waiting for input
    const done = asTask(await client.sendMessage(send(ECHO, {})))
    const resume = { tenant: '', message: userMessage([data(PART_RESUME, { resolution: {} })], { taskId: done.id }), configuration: undefined, metadata: undefined }
    await expect(client.sendMessage(resume)).rejects.toThrow()

    // raw JSON-RPC: garbage, an unknown method, an unknown agent
    const post = async (path: string, body: string): Promise<{ error?: { code: number } }> => {
      const r = await fetch(a2a.url + path, { method: 'POST', body, headers: { 'content-type': 'application/json', 'A2A-Version': '1.0' }, signal: AbortSignal.timeout(5000) })
      return await r.json() as { error?: { code: number } }
    }
    const rpc = `/a2a/agents/${worker.agentId}/jsonrpc`
    expect((await post(rpc, '{not json')).error?.code).toBe(-32700)
    expect((await post(rpc, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'NoSuchMethod', params: {} }))).error?.code).toBe(-32601)
    expect((await post(rpc, JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'SendMessage', params: { message: { role: 'ROLE_USER' } } }))).error).toBeDefined()
    expect((await post('/a2a/agents/not-an-agent/jsonrpc', JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'GetTask', params: { id: 'x' } }))).error).toBeDefined()
    // a body over the limit is refused before it is parsed
    const big = await fetch(a2a.url + rpc, { method: 'POST', headers: { 'content-type': 'application/json', 'A2A-Version': '1.0' }, body: JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'GetTask', params: { id: 'x'.repeat(A2A_BODY_MAX_BYTES) } }), signal: AbortSignal.timeout(5000) })
    const bigBody = await big.text()
    expect(big.status === 413 || bigBody.includes('"error"')).toBe(true)
    // still serving
    expect(asTask(await client.sendMessage(send(ECHO, { after: 'errors' }))).status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
  })
})
