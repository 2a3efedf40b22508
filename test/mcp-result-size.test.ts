/**
 * The size of an MCP tool result. `events` may return up to MCP_EVENTS_MAX
 * (500) events of up to EVENT_MAX_BYTES (48 KiB) each, and the server writes
 * every result twice (text content and structuredContent) on one stdio
 * line; the SDK's own stdio client refuses a line over 10 MiB and closes the
 * session. Until session 44 240 progress events of 28 KiB were enough to
 * kill it. Now `events` stops at MCP_RESULT_MAX_BYTES (`ended_by:
 * max_bytes`) and the session goes on.
 */
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { root } from './cli-helpers.ts'
import { MCP_RESULT_MAX_BYTES } from '../src/mcp/constants.ts'

const CAP = { capability_id: 'cap:mcp-talkative', version: '1.0.0' }
const STEPS = 240
const CHUNK = 'h'.repeat(28 * 1024)

describe('an MCP tool result larger than an MCP client reads', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  const token = newToken()
  let client: Client | undefined

  beforeAll(async () => {
    nodes = await startMesh(2)
    const [, b] = nodes as [MeshNode, MeshNode]
    b.runs.handle(CAP, async (ctx) => {
      for (let i = 0; i < STEPS; i++) await ctx.progress({ step: i, chunk: CHUNK })
      return { done: true }
    })
    await b.publishCard({ name: 'talkative', capabilities: [CAP] })
    api = await startApiServer(nodes[0]!, { token, port: 0 })
  })
  afterAll(async () => {
    await client?.close()
    await api?.close()
    await stopAll(nodes)
  })

  it('events stops at MCP_RESULT_MAX_BYTES (max_bytes), and the session goes on', async () => {
    const [a, b] = nodes as [MeshNode, MeshNode]
    const run = await a.delegate({ to_agent: b.agentId, task_id: 'task-big', capability: CAP, input: {} })
    await until(async () => (await a.events.lastEvent(run.run_id))?.type === 'run.completed', 'every event held by the delegator', 60_000)

    client = new Client({ name: 'mcp-size-test', version: '0.0.0' })
    const transport = new StdioClientTransport({ command: process.execPath, args: [join(root, 'bin/aap-mesh.mjs'), 'mcp', '--api-url', api.url, '--token', token], cwd: root, stderr: 'pipe' })
    const errors: string[] = []
    let closed = false
    await client.connect(transport)
    // set after connect: the Client installs its own handlers on the transport, then calls ours
    const onerror = client.onerror
    client.onerror = (e) => { errors.push(e.message); onerror?.(e) }
    client.onclose = () => { closed = true }

    // 242 events, about 6.6 MiB: under MCP_EVENTS_MAX, over the byte bound
    const res = await client.callTool({ name: 'events', arguments: { correlation_id: run.correlation_id, until: 'run.completed', wait_ms: 20_000 } })
    const out = res.structuredContent as { events: unknown[], ended_by: string }
    expect(out.ended_by).toBe('max_bytes')
    expect(out.events.length).toBeGreaterThan(0)
    expect(out.events.length).toBeLessThan(STEPS)
    expect(Buffer.byteLength(JSON.stringify(out))).toBeLessThanOrEqual(MCP_RESULT_MAX_BYTES)
    // the session is alive: another call is answered
    const again = await client.callTool({ name: 'get_run', arguments: { run_id: run.run_id } })
    expect((again.structuredContent as { run: { state: string } }).run.state).toBe('completed')
    expect(errors).toEqual([])
    expect(closed).toBe(false)
  }, 120_000)
})
