/**
 * A block raised by someone other than a sidecar agent (its delegator, or an
 * agent the delegator authorized) on a run the agent drives over HTTP. Real
 * nodes on the memory transport: A's API is the sidecar's (work stream and a
 * webhook at once), B's API is the delegator's, C is an authorized agent.
 * Every JSON answer of the servers is checked against the OpenAPI document.
 *
 * What must hold: the agent gets a `blocked` item at once (stream and
 * webhook); a `complete` it sends while blocked is kept and completes the run
 * after the resume (dropped if the run is canceled instead); the work is
 * handed out once, never again on resume.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient, ApiError, type SseEvent } from '../src/api/client.ts'
import { componentValidator } from '../src/api/openapi.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { newToken } from '../src/api/files.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { data, Stream } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:sidecar-block', version: '1.0.0' }
const isWorkItem = componentValidator('WorkItem')

function seg (id: string): string {
  return encodeURIComponent(id)
}

describe('external block of a run driven by a sidecar agent', () => {
  let nodes: MeshNode[]
  let a: MeshNode, b: MeshNode, c: MeshNode
  let apiA: ApiServer, apiB: ApiServer
  let agent: ApiClient, delegator: ApiClient
  let work: Stream
  let hook: Server
  const hooked: any[] = []
  let task = 0

  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[a, b, c] = nodes as [MeshNode, MeshNode, MeshNode]
    const tokenA = newToken()
    apiA = await startApiServer(a, { token: tokenA, port: 0, checkResponses: true })
    const tokenB = newToken()
    apiB = await startApiServer(b, { token: tokenB, port: 0, checkResponses: true })
    agent = new ApiClient(apiA.url, tokenA)
    delegator = new ApiClient(apiB.url, tokenB)
    hook = createServer((req: IncomingMessage, res) => {
      let body = ''
      req.setEncoding('utf8')
      req.on('data', (chunk: string) => { body += chunk })
      req.on('end', () => {
        hooked.push(JSON.parse(body))
        res.writeHead(204).end()
      })
    })
    await new Promise<void>(resolve => hook.listen(0, '127.0.0.1', resolve))
    const url = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/work`
    await agent.call('PUT', '/v1/card', { card: { name: 'sidecar', capabilities: [CAP] }, webhook: url })
    work = new Stream(agent, '/v1/work/stream')
    await work.ready()
  })

  afterAll(async () => {
    await work.close()
    await apiA.close()
    await apiB.close()
    await new Promise<void>(resolve => hook.close(() => { resolve() }))
    await stopAll(nodes)
  })

  async function delegate (authorized: string[] = []): Promise<Run> {
    const taskId = `sidecar-xb-${++task}`
    const { run } = await delegator.call<{ run: Run }>('POST', '/v1/delegate', { to_agent: a.agentId, task_id: taskId, capability: CAP, input: { task: taskId }, authorized })
    await work.next(e => e.event === 'work' && data(e).run.run_id === run.run_id, 'the work item')
    return run
  }

  const itemsOf = (runId: string): SseEvent[] => work.events.filter(e => e.event !== 'ready' && (data(e).run_id ?? data(e).run?.run_id) === runId)
  const hookedOf = (runId: string): any[] => hooked.filter(i => (i.run_id ?? i.run?.run_id) === runId)

  async function refused (client: ApiClient, method: string, path: string, body: unknown): Promise<ApiError> {
    const err = await client.call(method, path, body).then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(ApiError)
    return err as ApiError
  }

  it('the delegator blocks over HTTP: the agent gets a blocked item, its complete is kept, and the run completes with it after the resume', async () => {
    const run = await delegate()
    const id = seg(run.run_id)
    const blocked = await delegator.call<{ run: Run }>('POST', `/v1/runs/${id}/block`, { reason: 'human review', checkpoint_id: 'cp-l2-1' })
    expect(blocked.run).toMatchObject({ state: 'blocked', checkpoint_id: 'cp-l2-1' })

    // told at once, on the stream and on the webhook, with who raised it
    const item = data(await work.next(e => e.event === 'blocked' && data(e).run_id === run.run_id, 'the blocked item'))
    expect(isWorkItem(item)).toBe(true)
    expect(item).toMatchObject({ type: 'blocked', checkpoint_id: 'cp-l2-1', reason: 'human review', by: b.agentId, run: { state: 'blocked' } })
    await until(() => hookedOf(run.run_id).some(i => i.type === 'blocked'), 'the blocked item on the webhook')
    expect(hookedOf(run.run_id).find(i => i.type === 'blocked')).toEqual(item)

    // progress is refused while blocked; the finished work is kept
    expect((await refused(agent, 'POST', `/v1/runs/${id}/progress`, { payload: { pct: 90 } })).code).toBe('INVALID_TRANSITION')
    const held = await agent.call<{ run: Run }>('POST', `/v1/runs/${id}/complete`, { output: { answer: 7 } })
    expect(held.run).toMatchObject({ state: 'blocked', output: null })
    expect((await refused(agent, 'POST', `/v1/runs/${id}/complete`, { output: { answer: 8 } })).code).toBe('INVALID_TRANSITION')
    expect((await delegator.call<{ run: Run }>('GET', `/v1/runs/${id}`)).run.state).toBe('blocked')

    const resumed = await delegator.call<{ run: Run }>('POST', `/v1/runs/${id}/resume`, { resolution: { approved: true } })
    expect(resumed.run.state).not.toBe('blocked')
    const resume = data(await work.next(e => e.event === 'resume' && data(e).run_id === run.run_id, 'the resume item'))
    expect(isWorkItem(resume)).toBe(true)
    expect(resume).toMatchObject({ checkpoint_id: 'cp-l2-1', resolution: { approved: true }, by: b.agentId })
    const ended = data(await work.next(e => e.event === 'ended' && data(e).run_id === run.run_id, 'the ended item'))
    expect(ended.run).toMatchObject({ state: 'completed', output: { answer: 7 } })
    expect((await delegator.call<{ run: Run }>('GET', `/v1/runs/${id}`)).run).toMatchObject({ state: 'completed', output: { answer: 7 } })

    // the work went out once; the stream and the webhook saw the same items in the same order
    expect(itemsOf(run.run_id).map(e => e.event)).toEqual(['work', 'blocked', 'resume', 'ended'])
    await until(() => hookedOf(run.run_id).some(i => i.type === 'ended'), 'the ended item on the webhook')
    expect(hookedOf(run.run_id).map(i => i.type)).toEqual(['work', 'blocked', 'resume', 'ended'])
    for (const e of itemsOf(run.run_id)) expect(isWorkItem(data(e))).toBe(true)
  })

  it('an authorized agent blocks: the agent is told, a late stream client gets the open block, and the agent finishes after the resume', async () => {
    const run = await delegate([c.agentId])
    const id = seg(run.run_id)
    expect((await c.block(run.run_id, 'coordinator checkpoint', 'cp-l2-2')).state).toBe('blocked')
    const item = data(await work.next(e => e.event === 'blocked' && data(e).run_id === run.run_id, 'the blocked item'))
    expect(item).toMatchObject({ checkpoint_id: 'cp-l2-2', by: c.agentId })

    // a client that connects now gets the run's work and its open checkpoint
    const late = new Stream(agent, '/v1/work/stream')
    try {
      await late.ready()
      const mine = late.events.filter(e => e.event !== 'ready' && (data(e).run_id ?? data(e).run?.run_id) === run.run_id)
      expect(mine.map(e => e.event)).toEqual(['work', 'blocked'])
      expect(data(mine[1]!)).toMatchObject({ checkpoint_id: 'cp-l2-2', by: c.agentId, run: { state: 'blocked' } })
    } finally {
      await late.close()
    }

    expect((await c.resume(run.run_id, { go: 1 })).state).toBe('running')
    const resume = data(await work.next(e => e.event === 'resume' && data(e).run_id === run.run_id, 'the resume item'))
    expect(resume).toMatchObject({ checkpoint_id: 'cp-l2-2', resolution: { go: 1 }, by: c.agentId })
    const done = await agent.call<{ run: Run }>('POST', `/v1/runs/${id}/complete`, { output: { after: 'resume' } })
    expect(done.run).toMatchObject({ state: 'completed', output: { after: 'resume' } })
    await work.next(e => e.event === 'ended' && data(e).run_id === run.run_id, 'the ended item')
    expect(itemsOf(run.run_id).map(e => e.event)).toEqual(['work', 'blocked', 'resume', 'ended'])
  })

  it('a kept complete is dropped when the run is canceled instead of resumed; the run ends canceled and the work is not handed out again', async () => {
    const run = await delegate([c.agentId])
    const id = seg(run.run_id)
    await c.block(run.run_id, 'hold on', 'cp-l2-3')
    await work.next(e => e.event === 'blocked' && data(e).run_id === run.run_id, 'the blocked item')
    expect((await agent.call<{ run: Run }>('POST', `/v1/runs/${id}/complete`, { output: { dropped: true } })).run.state).toBe('blocked')
    await delegator.call('POST', `/v1/runs/${id}/cancel`, { reason: 'task withdrawn' })
    const ended = data(await work.next(e => e.event === 'ended' && data(e).run_id === run.run_id, 'the ended item'))
    expect(ended.run).toMatchObject({ state: 'failed', output: null, failure: { code: 'CANCELED' } })
    expect(itemsOf(run.run_id).map(e => e.event)).toEqual(['work', 'blocked', 'ended'])
    expect(apiA.stats()).toMatchObject({ openRuns: 0 })
  })

  it('the agent\'s own checkpoint still refuses a complete (it waits for its resume item)', async () => {
    const run = await delegate()
    const id = seg(run.run_id)
    await agent.call('POST', `/v1/runs/${id}/block`, { reason: 'ask the human', checkpoint_id: 'cp-own' })
    const item = data(await work.next(e => e.event === 'blocked' && data(e).run_id === run.run_id, 'the blocked item'))
    expect(item).toMatchObject({ checkpoint_id: 'cp-own', by: a.agentId })
    expect((await refused(agent, 'POST', `/v1/runs/${id}/complete`, { output: {} })).code).toBe('INVALID_TRANSITION')
    await delegator.call('POST', `/v1/runs/${id}/resume`, { resolution: { ok: true } })
    await work.next(e => e.event === 'resume' && data(e).run_id === run.run_id, 'the resume item')
    expect((await agent.call<{ run: Run }>('POST', `/v1/runs/${id}/complete`, { output: { ok: true } })).run.state).toBe('completed')
  })
})
