/**
 * `aap-mesh send` waits for the end of the work it delegated, whatever run
 * holds it by then. Found by session 46's review:
 *  - a run its executor handed off is `completed` with `output: null` and
 *    `handoff_to` set while the work goes on in the successor; send stopped
 *    there, printed `null` and exited 0. It now follows the line of handoffs
 *    to its end and prints the successor's output;
 *  - a retry with the idempotency key of a run that was blocked already got
 *    that run back, and send waited for good for a run.blocked that had been
 *    and gone. It now looks at the run it gets back and exits 1 (BLOCKED).
 * In-process nodes with their API servers; the CLI runs as its own process.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { data, Stream } from './api-helpers.ts'
import { cli } from './cli-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'

const CAP = { capability_id: 'cap:send-chain', version: '1.0.0' }

describe('aap-mesh send and the run that ends the work', () => {
  let nodes: MeshNode[]
  let b: MeshNode
  let c: MeshNode
  let apiA: ApiServer
  let apiB: ApiServer
  let tokenA: string
  let agentB: ApiClient
  let work: Stream

  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[, b, c] = nodes as [MeshNode, MeshNode, MeshNode]
    tokenA = newToken()
    apiA = await startApiServer(nodes[0]!, { token: tokenA, port: 0 })
    const tokenB = newToken()
    apiB = await startApiServer(b, { token: tokenB, port: 0 })
    agentB = new ApiClient(apiB.url, tokenB)
    c.runs.handle(CAP, async () => ({ finished_by: 'c' }))
    await c.publishCard({ name: 'c', capabilities: [CAP] })
    await agentB.call('PUT', '/v1/card', { card: { name: 'b', capabilities: [CAP] } })
    work = new Stream(agentB, '/v1/work/stream')
    await work.ready()
  })

  afterAll(async () => {
    await work.close()
    await apiA.close()
    await apiB.close()
    await stopAll(nodes)
  })

  const send = (task: string, more: string[] = []): ReturnType<typeof cli> =>
    cli(['send', '--api-url', apiA.url, '--token', tokenA, '--to', b.agentId, '--capability', `${CAP.capability_id}@${CAP.version}`, '--task', task, '--json', ...more])

  it('follows a handoff to the successor\'s end and prints its output', async () => {
    const task = 'send-chain-handoff'
    const sent = send(task)
    const item = await work.next(e => e.event === 'work' && data(e).run.correlation_id === task, 'the work item')
    const runId = data(item).run.run_id as string
    // the agent beside B hands the run to C, which completes it
    await agentB.call('POST', `/v1/runs/${encodeURIComponent(runId)}/handoff`, { to_agent: c.agentId })
    const r = await sent
    expect(r.code, r.stderr).toBe(0)
    expect(r.json.run.output).toEqual({ finished_by: 'c' })
    expect(r.json.run.handoff_from?.run_id).toBe(runId)
    expect(r.json.delegated_run).toBe(runId)
  })

  it('ends with BLOCKED (exit 1) when a retried key answers with a run blocked already', async () => {
    const task = 'send-chain-retry-blocked'
    const body = { to_agent: b.agentId, task_id: task, capability: CAP, input: {}, idempotency_key: 'send-chain-key-1' }
    const first = (await new ApiClient(apiA.url, tokenA).call<{ run: { run_id: string } }>('POST', '/v1/delegate', body)).run
    await work.next(e => e.event === 'work' && data(e).run.run_id === first.run_id, 'the work item')
    await agentB.call('POST', `/v1/runs/${encodeURIComponent(first.run_id)}/block`, { reason: 'which printer?', checkpoint_id: 'cp-retry' })
    // the same delegation again, as a user retrying after a lost answer
    const r = await send(task, ['--idempotency-key', 'send-chain-key-1'])
    expect(r.code).toBe(1)
    expect(r.stderr).toMatch(/BLOCKED/)
    expect(r.json.run.run_id).toBe(first.run_id)
  })
})
