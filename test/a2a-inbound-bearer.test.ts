/**
 * The inbound A2A server asked no credential: any client that reached it
 * could read, resume and cancel any task, and `start --a2a-host` took any
 * address. A server given a token (the CLI gives the node's API token when
 * it listens beyond loopback) now asks every request for
 * `Authorization: Bearer <token>`: one without it, or with another token,
 * gets 401 with `WWW-Authenticate: Bearer`, in its binding's shape, and its
 * cards declare the bearer scheme. A server beyond loopback with no token
 * does not start. Real nodes; the client is the SDK's, over 127.0.0.1.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory, RestTransportFactory, type Client } from '@a2a-js/sdk/client'
import { A2A_ERROR_CODE } from '@a2a-js/sdk/errors'
import { A2aServer } from '../src/a2a/server.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll } from './helpers.ts'
import { APPROVE, startA2aMesh, stopA2aMesh } from './fixtures/a2a-mesh.ts'
import { asTask, send } from './fixtures/a2a-messages.ts'

const TOKEN = 'a2a-test-token-0123456789abcdef'

/** An SDK client whose requests (card included) carry `authorization`. */
async function clientWith (url: string, authorization: string, preferred: 'JSONRPC' | 'HTTP+JSON'): Promise<Client> {
  const authed: typeof fetch = async (input, init) => {
    const headers = new Headers(init?.headers)
    headers.set('authorization', authorization)
    return await fetch(input, { ...init, headers })
  }
  return await new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl: authed }), new RestTransportFactory({ fetchImpl: authed })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl: authed }),
    preferredTransports: [preferred]
  })).createFromUrl(url)
}

interface Mesh { nodes: MeshNode[], worker: MeshNode, a2a: A2aServer }

describe('A2A inbound: a server given a bearer token', () => {
  let m: Mesh | undefined
  beforeAll(async () => {
    const nodes = await startMesh(2, { transport: 'tcp' })
    const [worker, gateway] = nodes as [MeshNode, MeshNode]
    worker.runs.handle(APPROVE, async (ctx) => ({ approved: (await ctx.block('needs a human yes', `cp-${ctx.run.correlation_id}`)).approved }))
    await worker.publishCard({ name: 'worker', capabilities: [APPROVE] })
    await gateway.publishCard({ name: 'gateway', capabilities: [] })
    m = { nodes, worker, a2a: await A2aServer.start(gateway, { port: 0, logger: silentLogger(), token: TOKEN }) }
  })
  afterAll(async () => {
    await m?.a2a.close()
    await stopAll(m?.nodes ?? [])
  })

  it('refuses a request without the token (401, WWW-Authenticate: Bearer) in its binding\'s shape', async () => {
    const { a2a, worker } = m as Mesh
    const card = await fetch(a2a.agentCardUrl(worker.agentId))
    expect(card.status).toBe(401)
    expect(card.headers.get('www-authenticate')).toBe('Bearer')
    expect(await card.json()).toMatchObject({ error: { code: 401, status: 'UNAUTHENTICATED' } })

    const rpc = await fetch(`${a2a.agentUrl(worker.agentId)}/jsonrpc`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'A2A-Version': '1.0', authorization: 'Bearer not-the-token' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'some-task' } })
    })
    expect(rpc.status).toBe(401)
    expect(rpc.headers.get('www-authenticate')).toBe('Bearer')
    expect(await rpc.json()).toMatchObject({ jsonrpc: '2.0', error: { code: A2A_ERROR_CODE.INVALID_REQUEST, data: { aap_code: 'UNAUTHORIZED' } } })

    const own = await fetch(`${a2a.url}/.well-known/agent-card.json`, { headers: { authorization: `Basic ${TOKEN}` } })
    expect(own.status).toBe(401)

    // the SDK's client without the token gets no card, so no client
    await expect(new ClientFactory().createFromUrl(a2a.clientUrl(worker.agentId))).rejects.toThrow()
  })

  it('serves a client with the token (the scheme in any case), on both bindings, and its cards declare the scheme', async () => {
    const { a2a, worker } = m as Mesh
    const card = await (await fetch(a2a.agentCardUrl(worker.agentId), { headers: { authorization: `Bearer ${TOKEN}` } })).json() as Record<string, unknown>
    // (the SDK's card handler writes the card's object as it is: the scheme's oneof as `$case` and `value`)
    expect(card.securitySchemes).toMatchObject({ bearer: { scheme: { $case: 'httpAuthSecurityScheme', value: { scheme: 'Bearer' } } } })
    expect(Object.keys(card.securitySchemes as object)).toEqual(['bearer'])
    expect(card.securityRequirements).toEqual([{ schemes: { bearer: { list: [] } } }])

    for (const [auth, binding, ctx] of [[`Bearer ${TOKEN}`, 'JSONRPC', 'ctx-bearer-rpc'], [`bearer ${TOKEN}`, 'HTTP+JSON', 'ctx-bearer-rest']] as const) {
      const client = await clientWith(a2a.clientUrl(worker.agentId), auth, binding)
      const task = asTask(await client.sendMessage(send(APPROVE, { order: 1 }, ctx)))
      expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
      expect((await client.getTask({ tenant: '', id: task.id })).id).toBe(task.id)
      expect((await client.cancelTask({ tenant: '', id: task.id, metadata: undefined })).status?.state).toBe(TaskState.TASK_STATE_CANCELED)
    }
  })
})

describe('A2A inbound: a server beyond loopback', () => {
  it('does not start without a token', async () => {
    const m = await startA2aMesh()
    try {
      // an address of TEST-NET-1 (RFC 5737), on no interface here: refused before any listen is tried
      await expect(A2aServer.start(m.gateway, { host: '192.0.2.1', port: 0, logger: silentLogger() })).rejects.toMatchObject({ code: 'INVALID_REQUEST' })
      // on loopback it stays open, as before
      expect((await fetch(m.a2a.agentCardUrl(m.worker.agentId))).status).toBe(200)
    } finally {
      await stopA2aMesh(m)
    }
  })
})
