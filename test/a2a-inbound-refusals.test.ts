/**
 * An agent the inbound A2A server cannot serve is refused in its binding's
 * shape. Before, every binding but JSON-RPC got 404 `{error: string}`, a
 * capacity refusal included (a client was told "not found" of an agent that
 * exists, and would not try again), and the JSON-RPC refusal always carried
 * `id: null` though the request's id could be read (JSON-RPC 2.0 allows null
 * only when it could not). Now: the SDK's REST error body, 503 at capacity
 * (DELEGATION_REFUSED) and 404 for no such agent; the JSON-RPC envelope
 * echoes the request's id. Real nodes; raw HTTP on 127.0.0.1.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import { ClientFactory } from '@a2a-js/sdk/client'
import { A2A_ERROR_CODE } from '@a2a-js/sdk/errors'
import { A2aServer } from '../src/a2a/server.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { asTask, send } from './fixtures/a2a-messages.ts'

const WAIT = { capability_id: 'cap:wait-for-abort', version: '1.0.0' }

interface RestError { error: { code: number, status: string, message: string, details: Array<Record<string, unknown>> } }

async function postJson (url: string, body: unknown): Promise<{ status: number, body: unknown }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'A2A-Version': '1.0' }, body: JSON.stringify(body) })
  return { status: res.status, body: await res.json() }
}

describe('A2A inbound: an agent that cannot be served', () => {
  let nodes: MeshNode[] = []
  let busy: MeshNode, other: MeshNode
  let a2a: A2aServer
  let started = 0

  beforeAll(async () => {
    nodes = await startMesh(3)
    const [gateway] = nodes as [MeshNode, MeshNode, MeshNode]
    ;[, busy, other] = nodes as [MeshNode, MeshNode, MeshNode]
    busy.runs.handle(WAIT, async (ctx) => {
      started++
      await new Promise<void>(resolve => { ctx.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
      return {}
    })
    await busy.publishCard({ name: 'busy', capabilities: [WAIT] })
    await other.publishCard({ name: 'other', capabilities: [{ capability_id: 'cap:nothing', version: '1.0.0' }] })
    a2a = await A2aServer.start(gateway, { port: 0, logger: silentLogger(), maxAgents: 1 })
    // the one agent served has a task working: no other agent can be served
    const client = await new ClientFactory().createFromUrl(a2a.clientUrl(busy.agentId))
    const req = send(WAIT, {})
    const task = asTask(await client.sendMessage({ ...req, configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: true } }))
    expect(task.status?.state).toBe(TaskState.TASK_STATE_WORKING)
    await until(() => started === 1, 'the run to start')
  })
  afterAll(async () => {
    await a2a?.close()
    await stopAll(nodes)
  })

  it('on the HTTP+JSON binding: the SDK\'s REST error body, 503 at capacity and 404 for no such agent', async () => {
    const full = await postJson(`${a2a.agentUrl(other.agentId)}/rest/v1/message:send`, send(WAIT, {}))
    expect(full.status).toBe(503)
    const body = full.body as RestError
    expect(body.error.code).toBe(503)
    expect(body.error.status).toBe('UNAVAILABLE')
    expect(body.error.message).toMatch(/DELEGATION_REFUSED/)
    expect(JSON.stringify(body.error.details)).toMatch(/DELEGATION_REFUSED/)
    // the card too
    expect((await fetch(a2a.agentCardUrl(other.agentId))).status).toBe(503)

    const none = await fetch(`${a2a.agentUrl('not-an-agent')}/rest/v1/tasks/t-1`)
    expect(none.status).toBe(404)
    const nb = await none.json() as RestError
    expect(nb.error.code).toBe(404)
    expect(nb.error.status).toBe('NOT_FOUND')
    expect(nb.error.message).toMatch(/AGENT_NOT_FOUND/)
  })

  it('on the JSON-RPC binding: the refusal echoes the request\'s id (null only when none could be read)', async () => {
    const url = `${a2a.agentUrl(other.agentId)}/jsonrpc`
    for (const id of [77, 'req-77']) {
      const r = await postJson(url, { jsonrpc: '2.0', id, method: 'GetTask', params: { id: 'some-task' } })
      expect(r.status).toBe(200)
      expect(r.body).toMatchObject({ jsonrpc: '2.0', id, error: { code: A2A_ERROR_CODE.UNSUPPORTED_OPERATION } })
    }
    const none = await postJson(url, { jsonrpc: '2.0', method: 'GetTask', params: { id: 'some-task' } })
    expect(none.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: A2A_ERROR_CODE.UNSUPPORTED_OPERATION } })
    // a body that is not JSON is answered as the binding answers it
    const bad = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"jsonrpc":' })
    expect(await bad.json()).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: A2A_ERROR_CODE.PARSE_ERROR } })
    // an agent served answers as before (the body read first reaches the SDK)
    const served = await postJson(`${a2a.agentUrl(busy.agentId)}/jsonrpc`, { jsonrpc: '2.0', id: 5, method: 'GetTask', params: { id: 'no-such-task' } })
    expect(served.body).toMatchObject({ jsonrpc: '2.0', id: 5, error: { code: A2A_ERROR_CODE.TASK_NOT_FOUND } })
  })

  it('the node\'s own card while its agent has none: the REST error body, 404 NOT_FOUND (was {error: string})', async () => {
    const res = await fetch(new URL('/.well-known/agent-card.json', a2a.url))
    expect(res.status).toBe(404)
    const body = await res.json() as RestError
    expect(body.error.status).toBe('NOT_FOUND')
    expect(body.error.message).toContain('no card yet')
  })
})
