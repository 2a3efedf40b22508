/**
 * The MCP `events` tool across a liveness verdict (protocols/events.md,
 * protocols/liveness.md): a subscriber gets, at one seq, first the
 * delegator's verdict (`declared_by`) and then the executor's own event,
 * which stands. Until session 55 the tool took the verdict's seq as seen and
 * dropped the replacement, in the call and in every later call given the
 * cursor back: an agent waiting `until: run.completed` was left with
 * EXECUTOR_LOST. Real nodes: the delegator's API, the SDK's Client over its
 * in-memory transport, and an executor cut off from run control while it
 * finishes the run (as in test/runs-liveness-supersede.test.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { createMcpServer } from '../src/mcp/server.ts'
import { MCP_EVENTS_WAIT_MAX_MS } from '../src/mcp/constants.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { until } from './helpers.ts'
import { TapClient } from './fixtures/tap-client.ts'
import { cutControl, gatedWorker } from './fixtures/control-cut.ts'

const GATE = { capability_id: 'cap:mcp-verdict-gate', version: '1.0.0' }
const liveness = { lostAfterMs: 1500, probeIntervalMs: 200 }

interface Ev { run_id: string, seq: number, type: string, declared_by?: string }
const seen = (events: Ev[]): string[] => events.map(e => `${e.seq}:${e.declared_by === undefined ? e.type : 'verdict'}`)

describe('the MCP events tool and a liveness verdict the executor\'s own event replaces', () => {
  let A: MeshNode, B: MeshNode
  let api: ApiServer
  let tap: TapClient
  let mcp: Client
  const gates = new Map<string, PromiseWithResolvers<void>>()
  const opts = { listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true }

  const call = async (args: Record<string, unknown>): Promise<{ events: Ev[], ended_by: string, after: Record<string, number> }> => {
    const r = await mcp.callTool({ name: 'events', arguments: args })
    expect(r.isError, JSON.stringify(r.structuredContent)).not.toBe(true)
    return r.structuredContent as { events: Ev[], ended_by: string, after: Record<string, number> }
  }

  beforeAll(async () => {
    A = await createMeshNode({ ...opts, liveness })
    B = await createMeshNode(opts)
    for (const n of [A, B]) await n.start()
    await B.join([A.addresses[0]!])
    await gatedWorker(B, GATE, gates)
    const token = newToken()
    api = await startApiServer(A, { token, port: 0 })
    tap = new TapClient(api.url, token)
    const server = createMcpServer(tap)
    const [ct, st] = InMemoryTransport.createLinkedPair()
    await server.connect(st)
    mcp = new Client({ name: 'mcp-verdict-test', version: '0.0.0' })
    await mcp.connect(ct)
  })
  afterAll(async () => {
    await mcp?.close()
    await api?.close()
    for (const n of [A, B]) await n?.stop()
  })

  it('a call waiting until run.completed gets the executor\'s run.completed after the verdict; a cursor past a verdict lets it come', async () => {
    const task = 'task-mcp-verdict-01'
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: GATE, input: {} })
    await until(() => gates.has(task), 'the handler at work')
    const started = await call({ correlation_id: task, until: 'run.started', wait_ms: 20_000 })
    expect(seen(started.events)).toEqual(['1:run.started'])

    const restore = await cutControl(B)
    await until(async () => (await A.runs.store.getOutgoing(run.run_id))?.failure?.code === 'EXECUTOR_LOST', 'the delegator to declare the run lost', 30_000)
    // a call that returns the verdict last
    const lost = await call({ correlation_id: task, after: started.after, until: 'run.failed', wait_ms: 20_000 })

    // a call waiting for the run's completion: its history holds the verdict, then the executor's end replaces it
    tap.seen = []
    const waiting = call({ correlation_id: task, until: 'run.completed', wait_ms: MCP_EVENTS_WAIT_MAX_MS })
    await until(() => tap.seen.includes('ready'), 'the waiting call past its history')
    gates.get(task)!.resolve()
    await until(async () => (await B.runs.store.get(run.run_id))?.state === 'completed', 'the executor to complete the run')
    await restore()
    const done = await waiting
    expect(seen(done.events)).toEqual(['1:run.started', '2:verdict', '2:run.completed'])
    expect(done.ended_by).toBe('until')
    expect(done.after).toEqual({ [run.run_id]: 2 })

    // the call that returned the verdict: its cursor names the seq before it, so the next call gets what stands
    expect(seen(lost.events)).toEqual(['2:verdict'])
    expect(lost.events[0]?.declared_by).toBe(A.agentId)
    expect(lost.after).toEqual({ [run.run_id]: 1 })
    const next = await call({ correlation_id: task, after: lost.after, wait_ms: 0 })
    expect(seen(next.events)).toEqual(['2:run.completed'])
    expect(next.after).toEqual({ [run.run_id]: 2 })
  }, 120_000)
})
