/**
 * A replay whose caller goes away: an API client that gives up (its
 * connection closes), an MCP call canceled or past its timeout. Found by
 * session 59's review: the API's replay handler passed the node no signal and
 * the collection waited on its syncs until its deadline, so a canceled replay
 * naming a participant nobody reaches held one of the API's
 * API_REPLAYS_CONCURRENT_MAX slots for its whole timeout_ms; four of them
 * refused every other replay (429 too_many_replays) meanwhile. The MCP
 * `replay` tool only aborts its HTTP request (canceled, or past the MCP
 * server's call timeout: the same abort), so it relies on the API.
 *
 * Each replay here asks for the longest collection allowed (longer than
 * `until` waits): the slots come back only because the callers went away.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js'
import { ApiClient } from '../src/api/client.ts'
import { API_REPLAYS_CONCURRENT_MAX } from '../src/api/constants.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { API_REPLAY_MAX_TIMEOUT_MS } from '../src/constants.ts'
import { MCP_REPLAY_TIMEOUT_MAX_MS } from '../src/mcp/constants.ts'
import { createMcpServer, type AapMcpServer } from '../src/mcp/server.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { rejectsWith, startLoneNodes, stopAll, until } from './helpers.ts'

async function connect (server: AapMcpServer): Promise<Client> {
  const [ct, st] = InMemoryTransport.createLinkedPair()
  await server.connect(st)
  const mcp = new Client({ name: 'replay-client-gone-test', version: '0.0.0' })
  await mcp.connect(ct)
  return mcp
}

describe('a replay whose caller goes away gives its slot back at once', () => {
  let nodes: MeshNode[] = []
  let node: MeshNode
  let api: ApiServer
  /** An agent nobody reaches: a replay naming it waits for it until its timeout. */
  let goneAgent: string
  const token = newToken()
  const mcps: Client[] = []
  const servers: AapMcpServer[] = []

  beforeAll(async () => {
    const [n, gone] = await startLoneNodes(2) as [MeshNode, MeshNode]
    node = n
    nodes = [node]
    goneAgent = gone.agentId
    await gone.stop()
    api = await startApiServer(node, { token, port: 0, checkResponses: true })
  })

  afterAll(async () => {
    for (const m of mcps) await m.close()
    for (const s of servers) await s.close()
    await api?.close()
    await stopAll(nodes)
  })

  async function freshReplaySucceeds (task: string): Promise<void> {
    // the slots come back well before any replay's timeout_ms (longer than `until` waits)
    await until(() => api.stats().replays === 0, 'the canceled replays to give their slots back')
    const r = await raw(`${api.url}/v1/events/${task}/replay?timeout_ms=0`, { token })
    expect(r.status).toBe(200)
    expect(r.body).toMatchObject({ correlation_id: task })
  }

  it('over HTTP: replays and timelines whose clients abort their requests', async () => {
    const ctls: AbortController[] = []
    const answers = Array.from({ length: API_REPLAYS_CONCURRENT_MAX }, async (_, i) => {
      const ctl = new AbortController()
      ctls.push(ctl)
      const op = i % 2 === 0 ? 'replay' : 'timeline'
      return fetch(`${api.url}/v1/events/http-gone-${i}/${op}?participant=${goneAgent}&timeout_ms=${API_REPLAY_MAX_TIMEOUT_MS}`, {
        headers: { authorization: `Bearer ${token}` },
        signal: ctl.signal
      })
    })
    await until(() => api.stats().replays === API_REPLAYS_CONCURRENT_MAX, 'every replay to hold its slot')
    for (const ctl of ctls) ctl.abort()
    for (const a of answers) await expect(a).rejects.toThrow()
    await freshReplaySucceeds('http-fresh')
  })

  it('over MCP: replay calls the client cancels', async () => {
    const server = createMcpServer(new ApiClient(api.url, token))
    servers.push(server)
    const mcp = await connect(server)
    mcps.push(mcp)
    const ctls: AbortController[] = []
    const calls = Array.from({ length: API_REPLAYS_CONCURRENT_MAX }, async (_, i) => {
      const ctl = new AbortController()
      ctls.push(ctl)
      return mcp.callTool({ name: 'replay', arguments: { correlation_id: `mcp-gone-${i}`, participant: [goneAgent], timeout_ms: MCP_REPLAY_TIMEOUT_MAX_MS } }, undefined, { signal: ctl.signal })
    })
    await until(() => api.stats().replays === API_REPLAYS_CONCURRENT_MAX, 'every replay call to hold its slot')
    for (const ctl of ctls) ctl.abort()
    for (const c of calls) await expect(c).rejects.toThrow()
    await freshReplaySucceeds('mcp-fresh')
  })

  it('the node\'s replay ends at once with INVALID_REQUEST cancelled when its signal aborts', async () => {
    const ctl = new AbortController()
    const replay = node.events.replay('signal-gone', { participants: [goneAgent], timeoutMs: API_REPLAY_MAX_TIMEOUT_MS, signal: ctl.signal })
    ctl.abort()
    const err = await rejectsWith(replay, 'INVALID_REQUEST')
    expect(err.details).toMatchObject({ reason: 'cancelled' })
    // a signal aborted already: nothing is collected
    await expect(node.events.replay('signal-gone-before', { signal: ctl.signal })).rejects.toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'cancelled' } })
  })
})
