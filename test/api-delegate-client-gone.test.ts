/**
 * A delegation through the local API whose client gives up (its connection
 * closes) before the executor answered. Found by session 57's review: the
 * API's delegate handler called node.delegate without a signal, so the
 * node kept waiting, the executor created the run after the client had gone,
 * and nobody held its handle: the run stayed running, holding its slot,
 * instead of being canceled as protocols/delegate.md says a caller that gave
 * up does with a run created late. The MCP `delegate` tool (cancelled, or
 * past its timeout) only aborts its HTTP request, so it relies on this.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { NodeMetrics } from '../src/api/metrics.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:api-delegate-gone', version: '1.0.0' }
const TERMINAL = new Set(['completed', 'failed'])

describe('a delegation whose API client goes away before the handle arrives', () => {
  let nodes: MeshNode[] = []
  let delegator: MeshNode
  let executor: MeshNode
  let api: ApiServer
  let token: string
  const metrics = new NodeMetrics()

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    delegator = nodes[0]!
    executor = nodes[1]!
    // the work itself waits until its run ends: a run nobody cancels stays running
    executor.runs.handle(CAP, async (ctx) => {
      await new Promise<void>((resolve) => { ctx.signal.addEventListener('abort', () => { resolve() }, { once: true }) })
      return { done: true }
    })
    await executor.publishCard({ name: 'gone-executor', capabilities: [CAP] })
    token = newToken()
    api = await startApiServer(delegator, { token, port: 0, metrics })
  })

  afterAll(async () => {
    executor.runs.setPolicy(undefined)
    await api.close()
    await stopAll(nodes)
  })

  async function executing (task: string): Promise<Run | undefined> {
    return (await executor.runs.list()).executing.find(r => r.correlation_id === task)
  }

  it('cancels the run the executor created after the client gave up (it ends failed, not running for good)', async () => {
    const task = 'task-api-gone'
    const asked = Promise.withResolvers<undefined>()
    const gate = Promise.withResolvers<undefined>()
    executor.runs.setPolicy(async ({ task_id: taskId }) => {
      if (taskId !== task) return undefined
      asked.resolve(undefined)
      return gate.promise
    })
    const ctl = new AbortController()
    const answered = fetch(`${api.url}/v1/delegate`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ to_agent: executor.agentId, task_id: task, capability: CAP, input: {} }),
      signal: ctl.signal
    })
    await asked.promise
    ctl.abort()
    await expect(answered).rejects.toThrow()
    // the delegation gave up at the delegator (its outcome counted) before the executor answers
    await until(async () => (await metrics.delegations.get()).values.some(v => v.labels.outcome !== 'ok' && v.value > 0), 'the delegation to give up')
    // the executor goes on once its policy answers: it creates the run nobody holds the handle of
    gate.resolve(undefined)
    await until(async () => (await executing(task)) !== undefined, 'the run at the executor')
    await until(async () => TERMINAL.has((await executing(task))?.state ?? ''), 'the late run to end')
    const run = await executing(task)
    expect(run?.state).toBe('failed')
    expect(run?.failure).toMatchObject({ code: 'CANCELED' })
  })
})
