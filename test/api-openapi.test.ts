/**
 * protocols/api.openapi.json against the running server, so the two cannot
 * drift: the server routes exactly the documented operations, and every
 * operation, called for real, answers with a body (or SSE data) that the
 * documented schema accepts. The check is made here, on the client side,
 * with ajv; the server runs without its own response check.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient, type QueryValue } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { apiDocument, componentValidator, operations, responseValidator, sseDataValidator } from '../src/api/openapi.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { UI_ROUTES } from '../src/api/ui-routes.ts'
import { DISCOVER_TIMEOUT_MAX_MS } from '../src/card/constants.ts'
import { API_REPLAY_MAX_TIMEOUT_MS, API_WEBHOOK_URL_MAX_CHARS, DISCOVER_MAX_RESULTS } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { data, raw, Stream } from './api-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'
import { BRIDGED_CAP, startApprovalServer } from './a2a-helpers.ts'

const CAP = { capability_id: 'cap:doc', version: '1.0.0' }
const doc = apiDocument as {
  openapi: string
  security: unknown[]
  components: { securitySchemes: Record<string, { type: string, scheme: string }>, schemas: Record<string, any> }
  paths: Record<string, Record<string, any>>
}

describe('the OpenAPI document and the server', () => {
  let nodes: MeshNode[]
  let a: MeshNode
  let b: MeshNode
  let apiA: ApiServer
  let apiB: ApiServer
  const tokens = { a: newToken(), b: newToken() }
  const exercised = new Set<string>()
  const streams: Stream[] = []

  /** Call an operation on a server, check the answer against the document, return the body. */
  async function call (api: ApiServer, token: string, operationId: string, params: Record<string, string> = {}, body?: unknown, query?: Record<string, QueryValue>): Promise<any> {
    const op = operations.find(o => o.operationId === operationId)
    if (op === undefined) throw new Error(`no operation ${operationId}`)
    let path = op.path
    for (const [k, v] of Object.entries(params)) path = path.replace(`{${k}}`, encodeURIComponent(v))
    const pairs: Array<[string, string]> = Object.entries(query ?? {}).flatMap(([k, v]): Array<[string, string]> =>
      v === undefined ? [] : Array.isArray(v) ? v.map(x => [k, x]) : [[k, String(v)]])
    const qs = pairs.length === 0 ? '' : `?${new URLSearchParams(pairs).toString()}`
    const res = await raw(api.url + path + qs, { method: op.method.toUpperCase(), token, ...(body === undefined ? {} : { body: JSON.stringify(body) }) })
    const documented = [...op.responses.keys()].filter(s => s !== 'default').map(Number)
    expect(documented, `${operationId} answered ${res.status}: ${JSON.stringify(res.body)}`).toContain(res.status)
    const check = responseValidator(operationId, res.status)!
    expect(check(res.body), `${operationId} ${res.status}: ${JSON.stringify(check.errors)}`).toBe(true)
    exercised.add(operationId)
    return res.body
  }

  /** Open an SSE operation; every data object is checked against the document as it comes. */
  function stream (api: ApiServer, token: string, operationId: string, path: string, query?: Record<string, QueryValue>): Stream {
    const s = new Stream(new ApiClient(api.url, token), path, query)
    streams.push(s)
    exercised.add(operationId)
    return s
  }

  function checkStream (operationId: string, s: Stream): void {
    const check = sseDataValidator(operationId)!
    const ready = componentValidator('StreamReady')
    expect(s.events.length).toBeGreaterThan(0)
    for (const e of s.events) {
      if (e.event === 'ready') {
        expect(ready(e.data), `${operationId} ready`).toBe(true)
        continue
      }
      expect(check(e.data), `${operationId} ${e.event}: ${JSON.stringify(check.errors)}`).toBe(true)
    }
  }

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[a, b] = nodes as [MeshNode, MeshNode]
    apiA = await startApiServer(a, { token: tokens.a, port: 0 })
    apiB = await startApiServer(b, { token: tokens.b, port: 0 })
  })

  afterAll(async () => {
    await Promise.all(streams.map(async s => s.close()))
    await apiA.close()
    await apiB.close()
    await stopAll(nodes)
  })

  it('is an OpenAPI 3.1 document with a bearer scheme (or the view\'s session) on every route and one unique operationId per operation', () => {
    expect(doc.openapi).toBe('3.1.0')
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer' })
    expect(doc.components.securitySchemes.session).toMatchObject({ type: 'apiKey', in: 'cookie', name: 'aap_ui_session' })
    expect(doc.security).toEqual([{ bearer: [] }, { session: [] }])
    // login codes are minted with the bearer token only
    expect(doc.paths['/v1/ui/login-codes']!.post.security).toEqual([{ bearer: [] }])
    const ids = operations.map(o => o.operationId)
    expect(new Set(ids).size).toBe(ids.length)
    for (const op of operations) {
      expect(op.responses.has('default') || op.sseData !== undefined, op.operationId).toBe(true)
      expect(op.responses.get('default'), `${op.operationId} documents its errors`).toBeDefined()
    }
    // the document's limits are the node's constants
    expect(doc.components.schemas.WebhookUrl.maxLength).toBe(API_WEBHOOK_URL_MAX_CHARS)
    const param = (path: string, name: string): any => doc.paths[path]!.get.parameters.find((p: { name: string }) => p.name === name)
    expect(param('/v1/events/{correlation_id}/replay', 'timeout_ms').schema.maximum).toBe(API_REPLAY_MAX_TIMEOUT_MS)
    expect(param('/v1/discover', 'limit').schema.maximum).toBe(DISCOVER_MAX_RESULTS)
    expect(param('/v1/discover', 'timeout_ms').schema.maximum).toBe(DISCOVER_TIMEOUT_MAX_MS)
  })

  it('routes exactly the documented operations (and the browser view\'s own page routes), no more and no fewer', () => {
    const documented = [...operations.map(o => `${o.method.toUpperCase()} ${o.route}`), ...UI_ROUTES.map(r => `${r.method} ${r.url}`)].sort()
    const routed = apiA.routes.map(r => `${r.method} ${r.url}`).sort()
    expect(routed).toEqual(documented)
  })

  it('answers every operation, called for real, with what the document says', async () => {
    const node = await call(apiA, tokens.a, 'getNode')
    expect(node.agent_id).toBe(a.agentId)
    const peers = await call(apiA, tokens.a, 'listPeers')
    expect(peers.peers.map((p: { agent_id: string }) => p.agent_id)).toContain(b.agentId)
    expect(peers.peers.find((p: { agent_id: string }) => p.agent_id === b.agentId).connections[0].type).toBe('direct')
    const login = await call(apiA, tokens.a, 'createLoginCode')
    expect(login.url).toBe(`${apiA.url}/ui/login?code=${login.code}`)

    // both sides register the capability (B so it can receive a handoff)
    await call(apiA, tokens.a, 'putCard', {}, { card: { name: 'doc-a', capabilities: [CAP], tags: ['doc'] } })
    await call(apiB, tokens.b, 'putCard', {}, { card: { name: 'doc-b', capabilities: [CAP] }, webhook: null })
    const card = await call(apiA, tokens.a, 'getCard')
    expect(card.serving).toEqual([CAP])
    const found = await call(apiA, tokens.a, 'discover', {}, undefined, { capability: 'cap:doc@1.0.0', tag: ['doc'], include_self: true, limit: 5 })
    expect(found.cards.map((c: { agent_id: string }) => c.agent_id)).toContain(a.agentId)

    const work = stream(apiA, tokens.a, 'workStream', '/v1/work/stream')
    const workB = stream(apiB, tokens.b, 'workStream', '/v1/work/stream')
    await Promise.all([work.ready(), workB.ready()])
    const delegate = async (task: string): Promise<Run> => {
      const r = (await call(apiB, tokens.b, 'delegate', {}, { to_agent: a.agentId, task_id: task, capability: CAP, input: { task } })).run as Run
      await work.next(e => e.event === 'work' && data(e).run.run_id === r.run_id)
      return r
    }

    // one run through its whole life
    const run = await delegate('doc-1')
    const events = stream(apiB, tokens.b, 'eventStream', `/v1/events/${run.correlation_id}/stream`, { participant: [a.agentId], history: true })
    await events.ready()
    const id = { run_id: run.run_id }
    await call(apiA, tokens.a, 'progress', id, { payload: { pct: 10 } })
    const saved = await call(apiA, tokens.a, 'saveContext', id, { context: { notes: ['kept for the next turn'] } })
    expect(saved).toEqual({ context_id: run.run_id, saved: { notes: ['kept for the next turn'] } })
    await call(apiA, tokens.a, 'block', id, { reason: 'check', checkpoint_id: 'cp-doc' })
    await call(apiB, tokens.b, 'resume', id, { resolution: { ok: true } })
    await work.next(e => e.event === 'resume' && data(e).run_id === run.run_id)
    await call(apiA, tokens.a, 'complete', id, { output: { done: true } })
    await work.next(e => e.event === 'ended' && data(e).run_id === run.run_id)
    await events.next(e => e.event === 'run.completed')
    expect((await call(apiB, tokens.b, 'getRun', id)).run.state).toBe('completed')
    const replay = await call(apiB, tokens.b, 'replay', { correlation_id: run.correlation_id }, undefined, { participant: [a.agentId], timeout_ms: 5000 })
    expect(replay.transitions.map((t: { kind: string }) => t.kind)).toEqual(['delegate', 'progress', 'block', 'resume', 'complete'])
    const timeline = await call(apiB, tokens.b, 'timeline', { correlation_id: run.correlation_id }, undefined, { participant: [a.agentId], timeout_ms: 5000 })
    expect(timeline.verdicts).toEqual(timeline.replay.events.map((e: { run_id: string, seq: number }) => ({ run_id: e.run_id, seq: e.seq, signature: 'valid', chain: 'linked' })))

    // fail, cancel, handoff
    const failing = await delegate('doc-2')
    expect((await call(apiA, tokens.a, 'fail', { run_id: failing.run_id }, { message: 'cannot do it' })).run.state).toBe('failed')
    const canceled = await delegate('doc-3')
    expect((await call(apiB, tokens.b, 'cancel', { run_id: canceled.run_id }, {})).run.failure.code).toBe('CANCELED')
    const moving = await delegate('doc-4')
    const moved = (await call(apiA, tokens.a, 'handoff', { run_id: moving.run_id }, { to_agent: b.agentId, context: { n: 1 } })).run as Run
    expect(moved.agent_id).toBe(b.agentId)
    await workB.next(e => e.event === 'work' && data(e).run.run_id === moved.run_id)
    const list = await call(apiB, tokens.b, 'listRuns', {}, undefined, { correlation_id: 'doc-4' })
    expect(list.executing.map((r: Run) => r.run_id)).toEqual([moved.run_id])

    // an A2A server joined to the mesh through the API: its skill on the card, the agent keeps its own
    const a2aServer = await startApprovalServer()
    try {
      expect((await call(apiB, tokens.b, 'listA2aAgents')).agents).toEqual([])
      const added = await call(apiB, tokens.b, 'addA2aAgent', {}, { url: a2aServer.url })
      expect(added.agent).toMatchObject({ url: `${a2aServer.url}/`, streaming: true, capabilities: [BRIDGED_CAP] })
      expect(added.card.capabilities).toEqual(expect.arrayContaining([CAP, BRIDGED_CAP]))
      expect((await call(apiB, tokens.b, 'getCard')).serving).toEqual([CAP])
      expect((await call(apiB, tokens.b, 'listA2aAgents')).agents.map((x: { name: string }) => x.name)).toEqual(['order approver'])
      const bad = await raw(apiB.url + '/v1/a2a/agents', { method: 'POST', token: tokens.b, body: JSON.stringify({ url: 'http://127.0.0.1:9/' }) })
      expect(bad.status).toBe(400)
      expect(responseValidator('addA2aAgent', 400)!(bad.body)).toBe(true)
    } finally {
      await a2aServer.close()
    }

    // artifacts: raw bytes in (not JSON), raw bytes out, fetched by B from A
    const up = await raw(`${apiA.url}/v1/artifacts?name=doc.txt`, { method: 'POST', token: tokens.a, body: 'doc bytes', type: 'text/plain' })
    expect(up.status).toBe(201)
    expect(responseValidator('putArtifact', 201)!(up.body)).toBe(true)
    exercised.add('putArtifact')
    const down = await raw(`${apiB.url}/v1/artifacts/${up.body.part.artifact as string}?from=${a.agentId}&media_type=text/plain`, { token: tokens.b })
    expect(down.status).toBe(200)
    expect(down.body).toBe('doc bytes')
    exercised.add('getArtifact')
    const gone = await raw(`${apiB.url}/v1/artifacts/${up.body.part.artifact as string}`, { method: 'DELETE', token: tokens.b })
    expect(gone.status).toBe(200)
    expect(responseValidator('deleteArtifact', 200)!(gone.body)).toBe(true)
    const notHere = await raw(`${apiB.url}/v1/artifacts/${up.body.part.artifact as string}`, { method: 'DELETE', token: tokens.b })
    expect(notHere.status).toBe(404)
    expect(responseValidator('deleteArtifact', 404)!(notHere.body)).toBe(true)
    exercised.add('deleteArtifact')
    const listed = await raw(`${apiA.url}/v1/artifacts?limit=1`, { token: tokens.a })
    expect(listed.status).toBe(200)
    expect(responseValidator('listArtifacts', 200)!(listed.body)).toBe(true)
    expect(listed.body.artifacts).toEqual([expect.objectContaining({ artifact: up.body.part.artifact, pinned: true, size: 9 })])
    const badLimit = await raw(`${apiA.url}/v1/artifacts?limit=0`, { token: tokens.a })
    expect(badLimit.status).toBe(400)
    expect(responseValidator('listArtifacts', 400)!(badLimit.body)).toBe(true)
    exercised.add('listArtifacts')

    // every error answer is documented too: one per operation
    for (const op of operations) {
      const path = op.path.replace('{run_id}', 'nope').replace('{correlation_id}', 'nope')
      const res = await raw(apiA.url + path, { method: op.method.toUpperCase(), token: 'wrong' })
      const check = responseValidator(op.operationId, res.status)!
      expect(check(res.body), `${op.operationId} ${res.status}`).toBe(true)
    }

    for (const s of [work, workB]) checkStream('workStream', s)
    checkStream('eventStream', events)
    expect(work.events.map(e => e.event)).toEqual(expect.arrayContaining(['ready', 'work', 'resume', 'ended']))
    expect([...exercised].sort()).toEqual(operations.map(o => o.operationId).sort())
  })

  it('a body that breaks its documented schema is caught (the check is not vacuous)', () => {
    const check = responseValidator('getRun', 200)!
    expect(check({ run: { run_id: 'x' } })).toBe(false)
    expect(check({ run: null })).toBe(false)
    const errors = responseValidator('getRun', 404)!
    expect(errors({ error: { code: 'RUN_NOT_FOUND', message: 'no' } })).toBe(true)
    expect(errors({ error: { code: 'NOT_A_CODE', message: 'no' } })).toBe(false)
    expect(errors({ error: { code: 'RUN_NOT_FOUND', message: 'no' }, extra: 1 })).toBe(false)
    const work = sseDataValidator('workStream')!
    expect(work({ type: 'work', id: 1 })).toBe(false)
  })
})
