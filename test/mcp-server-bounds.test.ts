/**
 * Bounds of the MCP server (src/mcp/) against real nodes and a real local
 * API over HTTP, driven by the SDK's own Client over its in-memory
 * transport. Each case was a finding of session 55's review: a replay over
 * MCP_RESULT_MAX_BYTES was refused with "narrow the call" though no argument
 * narrows it; tool calls in flight were unbounded (1200 discover calls
 * exhausted the API's connections); a frozen node gave the MCP client's own
 * protocol timeout instead of a TIMEOUT tool error; and the run_id
 * parameters said "URL-encoded" though the tools encode it themselves.
 */
import { createServer, type Server as HttpServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js'
import { ApiClient } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { createMcpServer, type AapMcpServer } from '../src/mcp/server.ts'
import {
  MCP_CALL_TIMEOUT_MS, MCP_CALLS_CONCURRENT_MAX, MCP_CALLS_QUEUED_MAX, MCP_EVENTS_HISTORY_MAX_MS, MCP_EVENTS_WAIT_MAX_MS, MCP_REPLAY_TIMEOUT_MAX_MS,
  MCP_RESULT_MAX_BYTES
} from '../src/mcp/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const TALK = { capability_id: 'cap:mcp-bounds-talk', version: '1.0.0' }
/** Progress events of the talkative run: with their copies in the run's `events`, about 3.4 MiB of replay. */
const STEPS = 60
const CHUNK = 't'.repeat(28 * 1024)

async function connect (server: AapMcpServer): Promise<Client> {
  const [ct, st] = InMemoryTransport.createLinkedPair()
  await server.connect(st)
  const mcp = new Client({ name: 'mcp-bounds-test', version: '0.0.0' })
  await mcp.connect(ct)
  return mcp
}

async function call (mcp: Client, name: string, args: Record<string, unknown>): Promise<{ isError: boolean, data: any }> {
  const r = await mcp.callTool({ name, arguments: args })
  const text = (r.content as Array<{ type: string, text: string }>)[0]?.text ?? ''
  return { isError: r.isError === true, data: JSON.parse(text) }
}

describe('the MCP server\'s bounds against a real node', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  const token = newToken()
  let server: AapMcpServer
  let mcp: Client

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    const [, b] = nodes as [MeshNode, MeshNode]
    b.runs.handle(TALK, async (ctx) => {
      for (let i = 0; i < STEPS; i++) await ctx.progress({ step: i, chunk: CHUNK })
      return { done: true }
    })
    await b.publishCard({ name: 'talkative', capabilities: [TALK] })
    api = await startApiServer(nodes[0]!, { token, port: 0 })
    server = createMcpServer(new ApiClient(api.url, token))
    mcp = await connect(server)
  })
  afterAll(async () => {
    await mcp?.close()
    await api?.close()
    await stopAll(nodes)
  })

  it('a replay too large for an MCP result comes without its events, marked truncated, pointing to the events tool', async () => {
    const [a, b] = nodes as [MeshNode, MeshNode]
    const task = 'task-mcp-big-replay'
    const run = await a.delegate({ to_agent: b.agentId, task_id: task, capability: TALK, input: {} })
    await until(async () => (await a.events.lastEvent(run.run_id))?.type === 'run.completed', 'every event held by the delegator', 60_000)

    const r = await call(mcp, 'replay', { correlation_id: task })
    expect(r.isError, JSON.stringify(r.data).slice(0, 300)).toBe(false)
    expect(r.data.truncated).toBe(true)
    expect(r.data.message).toContain('`events` tool')
    expect(Object.hasOwn(r.data, 'events')).toBe(false)
    expect(r.data.correlation_id).toBe(task)
    const mine = r.data.runs.find((x: { run_id: string }) => x.run_id === run.run_id)
    expect(mine).toMatchObject({ state: 'completed', executor: b.agentId, events_held: STEPS + 2 })
    expect(Object.hasOwn(mine, 'events')).toBe(false)
    expect(r.data.transitions.length).toBeGreaterThan(0)
    expect(Buffer.byteLength(JSON.stringify(r.data))).toBeLessThanOrEqual(MCP_RESULT_MAX_BYTES)
    // what the summary leaves out, the events tool pages through
    const ev = await call(mcp, 'events', { correlation_id: task, wait_ms: 0 })
    expect(ev.isError).toBe(false)
    expect(ev.data.events.length).toBeGreaterThan(0)
  }, 120_000)

  it('runs at most MCP_CALLS_CONCURRENT_MAX calls against the node at once, queues the rest and refuses past MCP_CALLS_QUEUED_MAX', async () => {
    const a = nodes[0]!
    // the node's side of each discover call the API serves: held until the test lets them all go
    const gate = Promise.withResolvers<void>()
    let active = 0
    let most = 0
    const own = a.discover
    a.discover = async () => {
      active++
      most = Math.max(most, active)
      try {
        await gate.promise
        return []
      } finally {
        active--
      }
    }
    try {
      const n = MCP_CALLS_CONCURRENT_MAX + MCP_CALLS_QUEUED_MAX + 1
      const pending = Array.from({ length: n }, async (_, i) => call(mcp, 'discover', { capability: `cap:mcp-bounds-${i}@1.0.0` }))
      // all calls in: the bound's worth at the node, the queue full and the one past it refused (or, unbounded,
      // more than the bound at the node)
      await until(() => active > MCP_CALLS_CONCURRENT_MAX ||
        (active === MCP_CALLS_CONCURRENT_MAX && server.calls?.queued === MCP_CALLS_QUEUED_MAX && server.calls.refused === 1), 'every call running or queued', 60_000)
      gate.resolve()
      const results = await Promise.all(pending)
      expect(most).toBe(MCP_CALLS_CONCURRENT_MAX)
      const refused = results.filter(r => r.isError)
      expect(refused).toHaveLength(1)
      expect(refused[0]?.data.error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'too_many_calls', running_max: MCP_CALLS_CONCURRENT_MAX, queued_max: MCP_CALLS_QUEUED_MAX } })
      expect(results.filter(r => !r.isError).every(r => Array.isArray(r.data.cards) && r.data.cards.length === 0)).toBe(true)
      expect(server.calls).toMatchObject({ running: 0, queued: 0 })
      expect(api.stats().droppedConnections).toBe(0)
    } finally {
      a.discover = own
      gate.resolve()
    }
    // the places are free again: a call is answered
    const again = await call(mcp, 'discover', { capability: 'cap:mcp-bounds-again@1.0.0' })
    expect(again.isError).toBe(false)
  }, 120_000)

  it('says the run id is the one returned, not a URL-encoded one (the tools encode it)', async () => {
    const { tools } = await mcp.listTools()
    for (const name of ['get_run', 'resume', 'cancel']) {
      const runId = (tools.find(t => t.name === name)?.inputSchema.properties as Record<string, { description?: string }> | undefined)?.run_id
      expect(runId?.description, name).toBe('the run id, as returned')
    }
    // and an id as returned, with the characters a path would need encoded, reaches its run
    const d = await call(mcp, 'get_run', { run_id: 'no-such:run/1' })
    expect(d.isError).toBe(true)
    expect(d.data.error.code).toBe('RUN_NOT_FOUND')
  })
})

describe('the MCP server against a frozen node', () => {
  let frozen: HttpServer
  let mcp: Client
  let server: AapMcpServer
  /** Requests the frozen node took and never answered. */
  let taken = 0

  beforeAll(async () => {
    frozen = createServer(() => { taken++ })
    await new Promise<void>(resolve => { frozen.listen(0, '127.0.0.1', resolve) })
    const { port } = frozen.address() as AddressInfo
    // 1.5 s: the request must reach the frozen node first (at 300 ms a busy machine's stall before the write could
    // end the call with nothing taken)
    server = createMcpServer(new ApiClient(`http://127.0.0.1:${port}`, newToken()), { callTimeoutMs: 1_500 })
    mcp = await connect(server)
  })
  afterAll(async () => {
    await mcp?.close()
    frozen?.closeAllConnections()
    await new Promise<void>(resolve => { frozen?.close(() => { resolve() }) })
  })

  it('a call the node never answers is a TIMEOUT tool error, before the MCP client gives up', async () => {
    const r = await call(mcp, 'get_run', { run_id: 'r-frozen' })
    expect(r.isError).toBe(true)
    expect(r.data.error).toMatchObject({ code: 'TIMEOUT', details: { timeout_ms: 1_500 } })
    expect(taken).toBe(1)
    expect(server.calls).toMatchObject({ running: 0, queued: 0, timedOut: 1 })
    // the default is under the 60 s an MCP client waits, and above what events and replay may take
    expect(MCP_CALL_TIMEOUT_MS).toBeLessThan(60_000)
    expect(MCP_CALL_TIMEOUT_MS).toBeGreaterThan(Math.max(MCP_EVENTS_HISTORY_MAX_MS + MCP_EVENTS_WAIT_MAX_MS, MCP_REPLAY_TIMEOUT_MAX_MS))
  }, 90_000)
})
