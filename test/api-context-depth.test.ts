/**
 * A saved context is nested at most PAYLOAD_MAX_DEPTH levels, as every other
 * value of an agent is (protocols/turns.md). Found by session 49's review:
 * `PUT /v1/runs/{id}/context` stored a context 100 levels deep, and one
 * 20,000 deep ran JSON.stringify out of stack (500 INTERNAL).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { data, raw, Stream } from './api-helpers.ts'
import { rejectsWith, startMesh, stopAll } from './helpers.ts'

const CAP = { capability_id: 'cap:api-context-depth', version: '1.0.0' }
const LOCAL = { capability_id: 'cap:api-context-depth-local', version: '1.0.0' }

/** `{"k": [[…]]}` nested `levels` deep, as text (JSON.stringify of it would run out of stack). */
function deepText (levels: number): string {
  return `{"k":${'['.repeat(levels)}${']'.repeat(levels)}}`
}

describe('the depth of a saved context', () => {
  let nodes: MeshNode[] = []
  let a: MeshNode
  let apiA: ApiServer
  let tokenA: string
  let agent: ApiClient
  let work: Stream
  let localSaved: Promise<unknown>

  beforeAll(async () => {
    nodes = await startMesh(2)
    a = nodes[0]!
    tokenA = newToken()
    apiA = await startApiServer(a, { token: tokenA, port: 0 })
    agent = new ApiClient(apiA.url, tokenA)
    // an in-process handler of the same node saves through the same store (the card's capability it serves is
    // not handed to the sidecar)
    const saved = Promise.withResolvers<unknown>()
    localSaved = saved.promise
    a.runs.handle(LOCAL, async (ctx) => {
      saved.resolve(await ctx.saveContext(JSON.parse(deepText(100)) as Record<string, unknown>).then(() => 'saved', (err: unknown) => err))
      return {}
    })
    await agent.call('PUT', '/v1/card', { card: { name: 'sidecar', capabilities: [CAP, LOCAL] } })
    work = new Stream(agent, '/v1/work/stream')
    await work.ready()
  })

  afterAll(async () => {
    await work.close()
    await apiA.close()
    await stopAll(nodes)
  })

  for (const levels of [100, 20_000]) {
    it(`answers a sidecar's context ${levels} levels deep with 400 too_deep, and keeps the one saved before`, async () => {
      const run = await nodes[1]!.delegate({ to_agent: a.agentId, task_id: `context-depth-${levels}`, capability: CAP, input: {} })
      await work.next(e => e.event === 'work' && data(e).run.run_id === run.run_id, 'work')
      const id = encodeURIComponent(run.run_id)
      await agent.call('PUT', `/v1/runs/${id}/context`, { context: { kept: true } })
      const save = await raw(`${apiA.url}/v1/runs/${id}/context`, { method: 'PUT', token: tokenA, body: `{"context":${deepText(levels)}}` })
      expect({ status: save.status, code: save.body.error?.code, reason: save.body.error?.details?.reason }).toEqual({ status: 400, code: 'INVALID_REQUEST', reason: 'too_deep' })
      // the next turn sees the context saved before the refused one
      await agent.call('POST', `/v1/runs/${id}/complete`, { output: {} })
      await work.next(e => e.event === 'ended' && data(e).run_id === run.run_id, 'ended')
      const next = await nodes[1]!.delegate({ to_agent: a.agentId, task_id: `context-depth-${levels}`, capability: CAP, input: {}, continue_run: run.run_id })
      const item = await work.next(e => e.event === 'work' && data(e).run.run_id === next.run_id, 'the next turn\'s work')
      expect(data<{ conversation: { saved: unknown } }>(item).conversation.saved).toEqual({ kept: true })
    })
  }

  it('refuses an in-process handler\'s context past the bound the same way', async () => {
    await nodes[1]!.delegate({ to_agent: a.agentId, task_id: 'context-depth-local', capability: LOCAL, input: {} })
    await rejectsWith(localSaved.then(r => { throw r }), 'INVALID_REQUEST')
  })
})
