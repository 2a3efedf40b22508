/**
 * The local agent API over real HTTP, on real nodes (an in-process mesh on
 * the memory transport). Node A's API is the sidecar of an agent played by
 * this test over HTTP; node B's API is a delegator's; node C executes
 * handed-off runs with an in-process handler. Every JSON answer of the
 * servers is checked against the OpenAPI document (checkResponses).
 */
import { createServer, type IncomingMessage, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient, ApiError } from '../src/api/client.ts'
import { componentValidator, operations } from '../src/api/openapi.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { newToken } from '../src/api/files.ts'
import { API_BODY_MAX_BYTES, API_WEBHOOK_MAX_ATTEMPTS, EVENTS_TOPIC_PREFIX } from '../src/constants.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { data, raw, Stream } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:test', version: '1.0.0' }
const isError = componentValidator('Error')
const isWorkItem = componentValidator('WorkItem')

function seg (id: string): string {
  return encodeURIComponent(id)
}

describe('local agent API', () => {
  let nodes: MeshNode[]
  let a: MeshNode
  let b: MeshNode
  let c: MeshNode
  let apiA: ApiServer
  let apiB: ApiServer
  let tokenA: string
  let tokenB: string
  let agent: ApiClient
  let delegator: ApiClient
  const streams: Stream[] = []
  let task = 0

  function open (client: ApiClient, path: string, query?: Record<string, string | string[] | boolean>, lastEventId?: string): Stream {
    const s = new Stream(client, path, query, lastEventId)
    streams.push(s)
    return s
  }

  async function delegate (input: Record<string, unknown> = {}): Promise<Run> {
    const res = await delegator.call<{ run: Run }>('POST', '/v1/delegate', { to_agent: a.agentId, task_id: `api-task-${++task}`, capability: CAP, input })
    return res.run
  }

  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[a, b, c] = nodes as [MeshNode, MeshNode, MeshNode]
    tokenA = newToken()
    apiA = await startApiServer(a, { token: tokenA, port: 0, checkResponses: true })
    tokenB = newToken()
    apiB = await startApiServer(b, { token: tokenB, port: 0, checkResponses: true })
    agent = new ApiClient(apiA.url, tokenA)
    delegator = new ApiClient(apiB.url, tokenB)
    // C serves the capability in-process: the target of handoffs
    c.runs.handle(CAP, async (ctx) => ({ finished_by: 'c', context: ctx.handedOff?.context ?? null }))
    await c.publishCard({ name: 'c', capabilities: [CAP] })
    // the agent beside A registers over HTTP
    const state = await agent.call<{ serving: unknown[] }>('PUT', '/v1/card', { card: { name: 'sidecar', capabilities: [CAP], tags: ['test'] } })
    expect(state.serving).toEqual([CAP])
  })

  afterAll(async () => {
    await Promise.all(streams.map(async s => s.close()))
    await apiA.close()
    await apiB.close()
    await stopAll(nodes)
  })

  it('every documented route refuses a missing, malformed or wrong token with 401 JSON, before doing anything', async () => {
    const seqBefore = a.card?.seq
    for (const op of operations) {
      const path = op.path.replace('{run_id}', seg(`${a.agentId}:00`)).replace('{correlation_id}', 'corr-1')
      const body = op.schema.body === undefined ? undefined : JSON.stringify({ card: { name: 'intruder' } })
      for (const authorization of [undefined, 'Basic YWxhZGRpbjpvcGVu', `Bearer ${tokenA}x`, 'Bearer ']) {
        const res = await raw(apiA.url + path, { method: op.method.toUpperCase(), ...(authorization === undefined ? {} : { authorization }), ...(body === undefined ? {} : { body }) })
        expect(res.status, `${op.method} ${op.path} with ${String(authorization)}`).toBe(401)
        expect(isError(res.body)).toBe(true)
        expect(res.body.error.code).toBe('UNAUTHORIZED')
        expect(res.headers.get('www-authenticate')).toBe('Bearer')
      }
    }
    expect(a.card?.seq).toBe(seqBefore)
    expect(apiA.stats()).toMatchObject({ streams: 0, workClients: 0 })
    // with the token, an unknown route is a JSON 404 too
    const missing = await raw(`${apiA.url}/v1/nothing`, { token: tokenA })
    expect(missing.status).toBe(404)
    expect(missing.body.error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'no_route' } })
  })

  it('bad input is a 4xx JSON error that says what is wrong, and changes nothing', async () => {
    const cardBefore = await agent.call('GET', '/v1/card')
    const runsA = await agent.call('GET', '/v1/runs')
    const runsB = await delegator.call('GET', '/v1/runs')
    const put = (body: string, type?: string): Promise<Awaited<ReturnType<typeof raw>>> => raw(`${apiA.url}/v1/card`, { method: 'PUT', token: tokenA, body, ...(type === undefined ? {} : { type }) })
    const post = (path: string, body?: string): Promise<Awaited<ReturnType<typeof raw>>> => raw(apiB.url + path, { method: 'POST', token: tokenB, ...(body === undefined ? {} : { body }) })
    const get = (path: string, headers?: Record<string, string>): Promise<Awaited<ReturnType<typeof raw>>> => raw(apiA.url + path, { token: tokenA, ...(headers === undefined ? {} : { headers }) })
    const goodDelegate = { to_agent: a.agentId, task_id: 'bad-1', capability: CAP, input: {} }
    const cases: Array<[string, Promise<Awaited<ReturnType<typeof raw>>>, number, RegExp]> = [
      ['malformed JSON', put('{"card": {'), 400, /not valid JSON/],
      ['unknown field', put(JSON.stringify({ card: { name: 'x', capability: [] } })), 400, /unknown field "capability"/],
      ['unknown top-level field', put(JSON.stringify({ card: { name: 'x' }, hook: 'x' })), 400, /unknown field "hook"/],
      ['wrong type', put(JSON.stringify({ card: { name: 5 } })), 400, /body\/card\/name must be string/],
      ['not an object', put('[1,2]'), 400, /must be object/],
      ['bad webhook', put(JSON.stringify({ card: { name: 'x' }, webhook: 'ftp://example.com/x' })), 400, /webhook/],
      ['bad capability', put(JSON.stringify({ card: { name: 'x', capabilities: [{ capability_id: 'has space', version: '1' }] } })), 400, /capability_id/],
      ['huge body', put(JSON.stringify({ card: { name: 'x', description: 'y'.repeat(API_BODY_MAX_BYTES) } })), 413, /too large/],
      ['text body', put('name=x', 'text/plain'), 415, /application\/json/],
      ['no body', post('/v1/delegate'), 400, /needs a JSON body/],
      ['delegate extra field', post('/v1/delegate', JSON.stringify({ ...goodDelegate, priority: 1 })), 400, /unknown field "priority"/],
      ['delegate input not an object', post('/v1/delegate', JSON.stringify({ ...goodDelegate, input: [1] })), 400, /input must be object/],
      ['delegate bad agent id', post('/v1/delegate', JSON.stringify({ ...goodDelegate, to_agent: 'nobody' })), 400, /to_agent/],
      ['discover without a query', get('/v1/discover'), 400, /capability and\/or a tag/],
      ['discover bad capability', get('/v1/discover?capability=cap%20x'), 400, /capability/],
      ['discover limit 0', get('/v1/discover?capability=cap:test&limit=0'), 400, /limit must be >= 1/],
      ['discover budget too long', get('/v1/discover?capability=cap:test&timeout_ms=30001'), 400, /timeout_ms must be <= 30000/],
      ['discover budget 0', get('/v1/discover?capability=cap:test&timeout_ms=0'), 400, /timeout_ms must be >= 1/],
      ['unknown query parameter', get('/v1/runs?sort=asc'), 400, /unknown field "sort"/],
      ['bad state', get('/v1/runs?state=sleeping'), 400, /state/],
      ['bad run id', get(`/v1/runs/${seg('has space')}`), 400, /run_id/],
      ['replay timeout too long', get('/v1/events/corr-1/replay?timeout_ms=99999999'), 400, /timeout_ms/],
      ['bad Last-Event-ID', get('/v1/work/stream', { 'last-event-id': 'abc' }), 400, /last-event-id/],
      ['bad correlation id', get(`/v1/events/${seg('a b')}/replay`), 400, /correlation_id/],
      ['unknown run', get(`/v1/runs/${seg(`${a.agentId}:ffff`)}`), 404, /no run/],
      ['progress on an unknown run', raw(`${apiA.url}/v1/runs/${seg(`${a.agentId}:ffff`)}/progress`, { method: 'POST', token: tokenA, body: '{"payload":{}}' }), 404, /no run/],
      ['resume an unknown remote run', post(`/v1/runs/${seg(`${c.agentId}:ffff`)}/resume`, '{"resolution":{}}'), 404, /no run/]
    ]
    for (const [what, pending, status, message] of cases) {
      const res = await pending
      expect(res.status, what).toBe(status)
      expect(isError(res.body), `${what}: ${JSON.stringify(res.body)}`).toBe(true)
      expect(res.body.error.message, what).toMatch(message)
      expect(res.body.error.code, what).toBe(status === 404 && what.includes('run') ? 'RUN_NOT_FOUND' : 'INVALID_REQUEST')
    }
    expect(await agent.call('GET', '/v1/card')).toEqual(cardBefore)
    expect(await agent.call('GET', '/v1/runs')).toEqual(runsA)
    expect(await delegator.call('GET', '/v1/runs')).toEqual(runsB)
    expect(apiA.stats()).toMatchObject({ streams: 0, openRuns: 0 })
  })

  it('a sidecar agent gets its run on the work stream, drives it over HTTP, and receives the resolution as a resume item', async () => {
    const work = open(agent, '/v1/work/stream')
    await work.ready()
    const run = await delegate({ text: 'hello' })
    expect(run).toMatchObject({ agent_id: a.agentId, delegator: b.agentId, state: 'running' })
    const item = data(await work.next(e => e.event === 'work' && data(e).run.run_id === run.run_id))
    expect(isWorkItem(item)).toBe(true)
    expect(item).toMatchObject({ type: 'work', input: { text: 'hello' }, handoff: null, restored: null })
    const id = seg(run.run_id)

    expect((await agent.call<{ run: Run }>('POST', `/v1/runs/${id}/progress`, { payload: { pct: 50 } })).run.state).toBe('running')
    const blocked = await agent.call<{ run: Run }>('POST', `/v1/runs/${id}/block`, { reason: 'please check', checkpoint_id: 'cp-1' })
    expect(blocked.run).toMatchObject({ state: 'blocked', checkpoint_id: 'cp-1', block_reason: 'please check' })

    // each side may only do its own part
    const refusals: Array<[ApiClient, string, unknown, number, string]> = [
      [agent, 'progress', { payload: {} }, 409, 'INVALID_TRANSITION'],
      [agent, 'complete', { output: {} }, 409, 'INVALID_TRANSITION'],
      [agent, 'resume', { resolution: {} }, 409, 'INVALID_TRANSITION'],
      [agent, 'cancel', {}, 403, 'UNAUTHORIZED'],
      [delegator, 'complete', { output: {} }, 403, 'UNAUTHORIZED'],
      [delegator, 'progress', { payload: {} }, 403, 'UNAUTHORIZED'],
      [delegator, 'block', { reason: 'again', checkpoint_id: 'cp-2' }, 409, 'INVALID_TRANSITION']
    ]
    for (const [client, verb, body, status, code] of refusals) {
      const err = await client.call('POST', `/v1/runs/${id}/${verb}`, body).then(() => undefined, (e: unknown) => e)
      expect(err, `${verb} by ${client === agent ? 'agent' : 'delegator'}`).toBeInstanceOf(ApiError)
      expect([(err as ApiError).status, (err as ApiError).code], verb).toEqual([status, code])
    }
    expect((await delegator.call<{ run: Run }>('GET', `/v1/runs/${id}`)).run.state).toBe('blocked')

    const resumed = await delegator.call<{ run: Run }>('POST', `/v1/runs/${id}/resume`, { resolution: { approved: true } })
    expect(resumed.run.state).toBe('running')
    const resume = data(await work.next(e => e.event === 'resume' && data(e).run_id === run.run_id))
    expect(isWorkItem(resume)).toBe(true)
    expect(resume).toMatchObject({ checkpoint_id: 'cp-1', resolution: { approved: true }, run: { state: 'running' } })
    expect(resume.id).toBeGreaterThan(item.id)

    const done = await agent.call<{ run: Run }>('POST', `/v1/runs/${id}/complete`, { output: { answer: 42 } })
    expect(done.run).toMatchObject({ state: 'completed', output: { answer: 42 } })
    const ended = data(await work.next(e => e.event === 'ended' && data(e).run_id === run.run_id))
    expect(ended.run.state).toBe('completed')
    const again = await agent.call('POST', `/v1/runs/${id}/complete`, { output: {} }).then(() => undefined, (e: unknown) => e)
    expect((again as ApiError).code).toBe('INVALID_TRANSITION')
    await work.close()
  })

  it('work waits for an agent that connects late; Last-Event-ID skips what it has seen; a cancel arrives as an ended item', async () => {
    const run = await delegate({ n: 1 })
    // nobody is connected: the run waits, and a client that connects gets it first
    const late = open(agent, '/v1/work/stream')
    const item = data(await late.next(e => e.event === 'work'))
    expect(item.run.run_id).toBe(run.run_id)
    await late.ready()
    expect(late.events.map(e => e.event)).toEqual(['work', 'ready'])
    await late.close()

    // reconnecting after the item: nothing is repeated
    const back = open(agent, '/v1/work/stream', undefined, String(item.id))
    await back.ready()
    expect(back.events.map(e => e.event)).toEqual(['ready'])

    const canceled = await delegator.call<{ run: Run }>('POST', `/v1/runs/${seg(run.run_id)}/cancel`, { reason: 'changed my mind' })
    expect(canceled.run).toMatchObject({ state: 'failed', failure: { code: 'CANCELED', message: 'changed my mind' } })
    const ended = data(await back.next(e => e.event === 'ended'))
    expect(ended).toMatchObject({ run_id: run.run_id, run: { state: 'failed' } })
    expect(apiA.stats().openRuns).toBe(0)
    await back.close()
  })

  it('a webhook agent gets each work item POSTed (retried after a failure) and drives the run over HTTP', async () => {
    const received: Array<{ body: any, attempt: number }> = []
    let attempts = 0
    const hook: Server = createServer((req: IncomingMessage, res) => {
      let body = ''
      req.setEncoding('utf8')
      req.on('data', (chunk: string) => { body += chunk })
      req.on('end', () => {
        attempts++
        // the first delivery fails: the node must retry it
        if (attempts === 1) {
          res.writeHead(500).end()
          return
        }
        received.push({ body: JSON.parse(body), attempt: attempts })
        res.writeHead(204).end()
        const item = JSON.parse(body)
        if (item.type === 'work') {
          void agent.call('POST', `/v1/runs/${seg(item.run.run_id as string)}/complete`, { output: { via: 'webhook' } })
        }
      })
    })
    await new Promise<void>(resolve => hook.listen(0, '127.0.0.1', resolve))
    const url = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/work?secret=s3cret`
    try {
      const state = await agent.call<{ webhook: string | null }>('PUT', '/v1/card', { card: { name: 'sidecar', capabilities: [CAP], tags: ['test'] }, webhook: url })
      expect(state.webhook).toBe(url)
      const run = await delegate({ via: 'webhook' })
      await until(() => received.some(r => r.body.type === 'ended' && r.body.run_id === run.run_id), 'the ended item on the webhook')
      const kinds = received.filter(r => r.body.run?.run_id === run.run_id).map(r => r.body.type)
      expect(kinds).toEqual(['work', 'ended'])
      expect(received.every(r => isWorkItem(r.body))).toBe(true)
      expect(attempts).toBe(received.length + 1)
      expect((await delegator.call<{ run: Run }>('GET', `/v1/runs/${seg(run.run_id)}`)).run).toMatchObject({ state: 'completed', output: { via: 'webhook' } })
      // omitting webhook keeps it; null removes it
      expect((await agent.call<{ webhook: string | null }>('PUT', '/v1/card', { card: { name: 'sidecar', capabilities: [CAP] } })).webhook).toBe(url)
      expect((await agent.call<{ webhook: string | null }>('PUT', '/v1/card', { card: { name: 'sidecar', capabilities: [CAP] }, webhook: null })).webhook).toBeNull()
    } finally {
      await new Promise<void>(resolve => hook.close(() => { resolve() }))
    }
  })

  it(`a webhook that never takes an item is tried API_WEBHOOK_MAX_ATTEMPTS (${API_WEBHOOK_MAX_ATTEMPTS}) times, then the item waits on the work stream`, async () => {
    let attempts = 0
    const gaveUp = Promise.withResolvers<void>()
    const hook: Server = createServer((req: IncomingMessage, res) => {
      req.resume()
      req.on('end', () => {
        attempts++
        res.writeHead(503).end()
        if (attempts === API_WEBHOOK_MAX_ATTEMPTS) gaveUp.resolve()
      })
    })
    await new Promise<void>(resolve => hook.listen(0, '127.0.0.1', resolve))
    const url = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/down`
    try {
      await agent.call('PUT', '/v1/card', { card: { name: 'sidecar', capabilities: [CAP], tags: ['test'] }, webhook: url })
      const run = await delegate({ via: 'a webhook that is down' })
      await gaveUp.promise
      // the item was not lost: a stream client gets it, and the webhook is not asked again
      const work = open(agent, '/v1/work/stream')
      try {
        const item = data(await work.next(e => e.event === 'work' && data(e).run.run_id === run.run_id))
        expect(isWorkItem(item)).toBe(true)
        expect(attempts).toBe(API_WEBHOOK_MAX_ATTEMPTS)
        // (with the webhook removed, the run's ended item goes to the stream alone)
        await agent.call('PUT', '/v1/card', { card: { name: 'sidecar', capabilities: [CAP], tags: ['test'] }, webhook: null })
        await agent.call('POST', `/v1/runs/${seg(run.run_id)}/complete`, { output: { via: 'stream after the webhook gave up' } })
        await until(async () => (await delegator.call<{ run: Run }>('GET', `/v1/runs/${seg(run.run_id)}`)).run.state === 'completed', 'the run to complete')
        expect(attempts).toBe(API_WEBHOOK_MAX_ATTEMPTS)
      } finally {
        await work.close()
      }
    } finally {
      await new Promise<void>(resolve => hook.close(() => { resolve() }))
    }
  })

  it('handoff: the agent hands its run on (executor side), and a delegator hands a run on (delegator side)', async () => {
    const work = open(agent, '/v1/work/stream')
    await work.ready()
    // executor side: the agent beside A hands its run to C
    const first = await delegate({ step: 1 })
    await work.next(e => e.event === 'work' && data(e).run.run_id === first.run_id)
    const moved = await agent.call<{ run: Run }>('POST', `/v1/runs/${seg(first.run_id)}/handoff`, { to_agent: c.agentId, context: { why: 'c finishes' } })
    expect(moved.run).toMatchObject({ agent_id: c.agentId, correlation_id: first.correlation_id, handoff_from: { run_id: first.run_id, agent_id: a.agentId } })
    await work.next(e => e.event === 'ended' && data(e).run_id === first.run_id)

    // delegator side: B asks A to hand its run to C; the agent is told its run ended
    const second = await delegate({ step: 2 })
    await work.next(e => e.event === 'work' && data(e).run.run_id === second.run_id)
    const moved2 = await delegator.call<{ run: Run }>('POST', `/v1/runs/${seg(second.run_id)}/handoff`, { to_agent: c.agentId })
    expect(moved2.run).toMatchObject({ agent_id: c.agentId, correlation_id: second.correlation_id })
    const ended = data(await work.next(e => e.event === 'ended' && data(e).run_id === second.run_id))
    expect(ended.run).toMatchObject({ state: 'completed', handoff_to: { run_id: moved2.run.run_id, agent_id: c.agentId } })

    // C's handler completes both; the delegator sees it through the API
    for (const r of [moved.run, moved2.run]) {
      const events = open(delegator, `/v1/events/${seg(r.correlation_id)}/stream`)
      await events.next(e => e.event === 'run.completed' && data(e).run_id === r.run_id)
      await events.close()
    }
    const final = await delegator.call<{ run: Run }>('GET', `/v1/runs/${seg(moved.run.run_id)}`)
    expect(final.run).toMatchObject({ state: 'completed', output: { finished_by: 'c', context: { why: 'c finishes' } } })
    // a terminal run is read-only
    const refused = await delegator.call('POST', `/v1/runs/${seg(second.run_id)}/handoff`, { to_agent: c.agentId }).then(() => undefined, (e: unknown) => e)
    expect([(refused as ApiError).status, (refused as ApiError).code]).toEqual([409, 'INVALID_TRANSITION'])
    await work.close()
  })

  it('the event stream goes from history to live in order, and replay returns the lifecycle', async () => {
    const work = open(agent, '/v1/work/stream')
    await work.ready()
    const run = await delegate()
    await work.next(e => e.event === 'work' && data(e).run.run_id === run.run_id)
    await agent.call('POST', `/v1/runs/${seg(run.run_id)}/progress`, { payload: { step: 'one' } })
    const events = open(delegator, `/v1/events/${seg(run.correlation_id)}/stream`, { participant: [a.agentId] })
    await events.next(e => e.event === 'run.progress')
    await events.ready()
    await agent.call('POST', `/v1/runs/${seg(run.run_id)}/block`, { reason: 'r', checkpoint_id: 'cp-live' })
    await events.next(e => e.event === 'run.blocked')
    await delegator.call('POST', `/v1/runs/${seg(run.run_id)}/resume`, { resolution: { ok: 1 } })
    await work.next(e => e.event === 'resume' && data(e).run_id === run.run_id)
    await agent.call('POST', `/v1/runs/${seg(run.run_id)}/complete`, { output: { ok: 1 } })
    await events.next(e => e.event === 'run.completed')
    const seen = events.events.filter(e => e.event !== 'ready')
    expect(seen.map(e => [e.event, data(e).seq])).toEqual([['run.started', 1], ['run.progress', 2], ['run.blocked', 3], ['run.progress', 4], ['run.completed', 5]])
    expect(seen.every(e => data(e).correlation_id === run.correlation_id)).toBe(true)

    const replay = await delegator.call<{ transitions: Array<{ kind: string }>, checkpoints: unknown[] }>('GET', `/v1/events/${seg(run.correlation_id)}/replay`)
    expect(replay.transitions.map(t => t.kind)).toEqual(['delegate', 'progress', 'block', 'resume', 'complete'])
    expect(replay.checkpoints).toEqual([expect.objectContaining({ checkpoint_id: 'cp-live', resolution: { ok: 1 }, attested: true })])
    await events.close()
    await work.close()
  })

  it('a client that disconnects from a stream leaks nothing: its subscription closes and the node leaves the topic', async () => {
    const pubsub = b.host.services.pubsub
    const topic = `${EVENTS_TOPIC_PREFIX}leak-1`
    // the streams of the tests before have been closed by their clients: wait for the server to see it
    await until(() => apiB.stats().streams === 0 && apiA.stats().streams === 0, 'earlier streams to close')
    const before = { stats: apiB.stats(), topics: b.events.topics(), pubsub: pubsub.getTopics().length }
    expect(before.stats).toMatchObject({ streams: 0, eventSubscriptions: 0 })

    const s = open(delegator, '/v1/events/leak-1/stream')
    await s.ready()
    expect(apiB.stats()).toMatchObject({ streams: 1, eventSubscriptions: 1 })
    expect(b.events.topics()).toContain('leak-1')
    expect(pubsub.getTopics()).toContain(topic)
    await s.close()
    await until(() => apiB.stats().streams === 0 && apiB.stats().eventSubscriptions === 0, 'the stream and its subscription to close')
    // left, and nothing new followed (an earlier case's track may have been let go meanwhile: a subset)
    expect(b.events.topics()).not.toContain('leak-1')
    for (const t of b.events.topics()) expect(before.topics).toContain(t)
    // the gossip topic lingers EVENTS_TOPIC_LINGER_MS for a next run of the task, then goes
    await until(() => !pubsub.getTopics().includes(topic), 'the node to leave the gossip topic')

    // a client that leaves while the node is still subscribing (dialing a participant that is not there)
    const ghost = agentIdOf(await generateKeyPair('Ed25519'))
    const early = open(delegator, '/v1/events/leak-2/stream', { participant: [ghost] })
    await until(() => b.events.topics().includes('leak-2'), 'the subscription to start')
    await early.close()
    await until(() => !b.events.topics().includes('leak-2') && apiB.stats().eventSubscriptions === 0 && apiB.stats().streams === 0, 'the abandoned subscription to close')
    expect(early.events).toEqual([])

    // a work stream client that leaves is dropped too
    const w = open(agent, '/v1/work/stream')
    await w.ready()
    expect(apiA.bridge.stats.sinks).toBe(1)
    await w.close()
    await until(() => apiA.bridge.stats.sinks === 0 && apiA.stats().streams === 0, 'the work client to go')
    await until(() => pubsub.getTopics().length <= before.pubsub, 'every lingering topic to go')
  })

  it('streams are bounded: over the limit a stream is refused with 429 JSON until one closes', async () => {
    const token = newToken()
    const small = await startApiServer(c, { token, port: 0, maxSseClients: 2, checkResponses: true })
    try {
      const client = new ApiClient(small.url, token)
      const s1 = open(client, '/v1/work/stream')
      const s2 = open(client, '/v1/events/bounded-1/stream')
      await Promise.all([s1.ready(), s2.ready()])
      const refused = await raw(`${small.url}/v1/work/stream`, { token })
      expect(refused.status).toBe(429)
      expect(refused.body.error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'too_many_streams', limit: 2 } })
      const refusedEvents = await raw(`${small.url}/v1/events/bounded-2/stream`, { token })
      expect(refusedEvents.status).toBe(429)
      expect(c.events.topics()).not.toContain('bounded-2')
      await s1.close()
      await until(() => small.stats().streams === 1, 'the first stream to close')
      const s3 = open(client, '/v1/work/stream')
      await s3.ready()
      expect(small.stats().streams).toBe(2)
    } finally {
      await small.close()
    }
    expect(small.stats()).toMatchObject({ streams: 0, eventSubscriptions: 0 })
  })
})
