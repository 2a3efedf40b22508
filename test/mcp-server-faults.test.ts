/**
 * The MCP server of src/mcp/ against real nodes and a real local API over
 * HTTP, driven by the SDK's own Client over its in-memory transport. Each
 * case was a finding of session 44's review: a cancelled events call kept
 * one of the node's stream slots for its whole wait, error details were
 * dropped, the node dying mid-wait threw away the events read as INTERNAL
 * "terminated", an input too deep for JSON.stringify was UNREACHABLE, and
 * ids "." and ".." reached other routes.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js'
import { ApiClient } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { createMcpServer } from '../src/mcp/server.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { TapClient } from './fixtures/tap-client.ts'

const APPROVE = { capability_id: 'cap:mcp-approve', version: '1.0.0' }

interface Side { api: ApiServer, client: TapClient, mcp: Client }

async function side (node: MeshNode, maxSseClients?: number): Promise<Side> {
  const token = newToken()
  const api = await startApiServer(node, { token, port: 0, ...(maxSseClients === undefined ? {} : { maxSseClients }) })
  const client = new TapClient(api.url, token)
  const server = createMcpServer(client)
  const [ct, st] = InMemoryTransport.createLinkedPair()
  await server.connect(st)
  const mcp = new Client({ name: 'mcp-server-test', version: '0.0.0' })
  await mcp.connect(ct)
  return { api, client, mcp }
}

async function call (mcp: Client, name: string, args: Record<string, unknown>): Promise<{ isError: boolean, data: any, structured: any }> {
  const r = await mcp.callTool({ name, arguments: args })
  const text = (r.content as Array<{ type: string, text: string }>)[0]?.text ?? ''
  return { isError: r.isError === true, data: JSON.parse(text), structured: r.structuredContent }
}

describe('the MCP server against a real node', () => {
  let nodes: MeshNode[] = []
  let worker: MeshNode
  let small: Side
  let other: Side

  beforeAll(async () => {
    nodes = await startMesh(3, { transport: 'tcp' })
    worker = nodes[0]!
    worker.runs.handle(APPROVE, async (ctx) => {
      const r = await ctx.block('approve?', 'cp-mcp')
      return { approved: r.approved }
    })
    await worker.publishCard({ name: 'mcp-worker', capabilities: [APPROVE] })
    small = await side(nodes[1]!, 2)
    other = await side(nodes[2]!)
  })
  afterAll(async () => {
    for (const s of [small, other]) {
      await s?.mcp.close()
      await s?.api.close()
    }
    await stopAll(nodes)
  })

  it('a cancelled events call lets go of its stream of the node; a refusal keeps its details', async () => {
    const cancelled = async (correlation: string): Promise<void> => {
      const ac = new AbortController()
      const p = small.mcp.callTool({ name: 'events', arguments: { correlation_id: correlation, wait_ms: 30_000 } }, undefined, { signal: ac.signal })
      await until(() => small.api.stats().streams === 1, 'the call\'s stream open')
      ac.abort()
      await expect(p).rejects.toThrow()
      await until(() => small.api.stats().streams === 0, 'the cancelled call\'s stream closed')
    }
    await cancelled('cancel-1')
    await cancelled('cancel-2')
    await cancelled('cancel-3')
    // the slots are free: a call is answered
    const fine = await call(small.mcp, 'events', { correlation_id: 'cancel-4', wait_ms: 0 })
    expect(fine.isError).toBe(false)
    expect(fine.data.ended_by).toBe('waited')
    // a refusal of the node carries its machine-readable details: both of the node's two slots taken
    // held until the refusal is read (a wait of 2 s could end first on a busy machine, and free a slot)
    const holding = new AbortController()
    const held = [0, 1].map(async (i) => small.mcp.callTool({ name: 'events', arguments: { correlation_id: `held-${i}`, wait_ms: 30_000 } }, undefined, { signal: holding.signal }))
    await until(() => small.api.stats().streams === 2, 'two streams held')
    const third = await call(small.mcp, 'events', { correlation_id: 'cancel-5', wait_ms: 0 })
    expect(third.isError).toBe(true)
    expect(third.data.error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'too_many_streams', limit: 2 } })
    expect(third.structured.error.details).toEqual(third.data.error.details)
    holding.abort()
    for (const r of await Promise.allSettled(held)) expect(r.status).toBe('rejected')
    await until(() => small.api.stats().streams === 0, 'the held calls\' streams closed')
  }, 60_000)

  it('the node dying mid-wait keeps the events already read (stream_broken)', async () => {
    let found: any
    await until(async () => {
      found = await call(other.mcp, 'discover', { capability: 'cap:mcp-approve@1.0.0' })
      return found.data.cards?.length > 0
    }, 'the worker to be found')
    const d = await call(other.mcp, 'delegate', { to_agent: worker.agentId, task_id: 'corr-die', capability: APPROVE, input: {} })
    expect(d.isError).toBe(false)
    const blocked = await call(other.mcp, 'events', { correlation_id: 'corr-die', until: 'run.blocked', wait_ms: 20_000 })
    expect(blocked.data.events.map((e: { type: string }) => e.type)).toEqual(['run.started', 'run.blocked'])

    other.client.seen = []
    const p = call(other.mcp, 'events', { correlation_id: 'corr-die', wait_ms: 30_000 })
    await until(() => other.client.seen.includes('ready'), 'the tool past ready with its two events')
    expect(other.client.seen.filter(e => e.startsWith('run.'))).toEqual(['run.started', 'run.blocked'])
    // the node process dies: its sockets close without the chunked stream's end (as SIGKILL does)
    ;(other.api as any).app.server.closeAllConnections()
    const r = await p
    expect(r.isError).toBe(false)
    expect(r.data.ended_by).toBe('stream_broken')
    expect(r.data.events.map((e: { type: string }) => e.type)).toEqual(['run.started', 'run.blocked'])
  }, 60_000)

  it('an input nested too deep is INVALID_REQUEST too_deep, however deep', async () => {
    // what the node answers for a payload nested too deep
    let nested: unknown = 1
    for (let i = 0; i < 200; i++) nested = [nested]
    const node = await call(other.mcp, 'delegate', { to_agent: worker.agentId, task_id: 'deep-1', capability: APPROVE, input: { x: nested } })
    expect(node.isError).toBe(true)
    expect(node.data.error.code).toBe('INVALID_REQUEST')
    // 6000 levels: 12 KB, within the schema (input is any object) and API_BODY_MAX_BYTES; JSON.stringify cannot walk it
    let deep: unknown = 1
    for (let i = 0; i < 6000; i++) deep = [deep]
    const r = await call(other.mcp, 'delegate', { to_agent: worker.agentId, task_id: 'deep-2', capability: APPROVE, input: { x: deep } })
    expect(r.isError).toBe(true)
    expect(r.data.error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'too_deep' } })
  })

  it('ids "." and ".." are refused by the schema (no URL path can carry them), for a task too', async () => {
    for (const [tool, args] of [['get_run', { run_id: '.' }], ['replay', { correlation_id: '..' }], ['cancel', { run_id: '..' }],
      ['delegate', { to_agent: worker.agentId, task_id: '..', capability: APPROVE, input: {} }]] as const) {
      const r = await call(other.mcp, tool, args)
      expect(r.isError, tool).toBe(true)
      expect(r.data.error.code, tool).toBe('INVALID_REQUEST')
      expect(r.data.error.message, tool).not.toContain('no route')
    }
    // the API refuses a task named ".." too, so no task exists that no URL can name
    const viaApi = await new ApiClient(other.api.url, (other.client as unknown as { token: string }).token).call('POST', '/v1/delegate', { to_agent: worker.agentId, task_id: '..', capability: APPROVE, input: {} }).then(() => undefined, (e: unknown) => e as { code: string })
    expect(viaApi?.code).toBe('INVALID_REQUEST')
  })
})
