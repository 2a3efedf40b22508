/**
 * Fuzz properties of the local agent API over real HTTP on 127.0.0.1: every
 * route that takes a body gets mutated and arbitrary bodies (JSON and not),
 * and run routes get arbitrary run ids. Each answer is a documented one (the
 * server checks its JSON answers against the OpenAPI document and answers
 * 500 on a mismatch), never a 5xx, and every error is a typed Error body.
 * POST /v1/a2a/agents is left out: a body that names a URL makes the node
 * call it, and the fuzzer must not make the node call anything off this host.
 */
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { componentValidator } from '../src/api/openapi.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { newToken } from '../src/api/files.ts'
import type { MeshNode } from '../src/node.ts'
import { newRunId } from '../src/runlog/event.ts'
import { raw } from './api-helpers.ts'
import { json, mutate, mutation } from './fixtures/fuzz.ts'
import { startMesh, stopAll } from './helpers.ts'

const CAP = { capability_id: 'cap:fuzz-api', version: '1.0.0' }
const OTHER = { capability_id: 'cap:fuzz-other', version: '1.0.0' }
const isError = componentValidator('Error')
const RUNS = 25

describe('fuzz: API bodies and paths get a typed answer, never a 5xx', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  let token: string
  let target: MeshNode
  let fakeRun: string

  beforeAll(async () => {
    nodes = await startMesh(2)
    target = nodes[1]!
    await target.publishCard({ name: 'target', capabilities: [OTHER] })
    token = newToken()
    api = await startApiServer(nodes[0]!, { token, port: 0, host: '127.0.0.1', checkResponses: true })
    fakeRun = newRunId(nodes[0]!.agentId)
  })

  afterAll(async () => {
    await api.close()
    await stopAll(nodes)
  })

  const seeds = (): Array<{ method: string, path: string, body: Record<string, unknown> }> => {
    const run = `/v1/runs/${encodeURIComponent(fakeRun)}`
    return [
      { method: 'PUT', path: '/v1/card', body: { card: { name: 'fuzz', capabilities: [CAP], tags: ['fuzz'] } } },
      { method: 'POST', path: '/v1/delegate', body: { to_agent: target.agentId, task_id: 'api-fuzz', capability: CAP, input: { q: 1 } } },
      { method: 'POST', path: `${run}/progress`, body: { payload: { pct: 1 } } },
      { method: 'POST', path: `${run}/block`, body: { reason: 'r', checkpoint_id: 'cp-1' } },
      { method: 'POST', path: `${run}/resume`, body: { resolution: {} } },
      { method: 'POST', path: `${run}/complete`, body: { output: {} } },
      { method: 'POST', path: `${run}/fail`, body: { message: 'm' } },
      { method: 'POST', path: `${run}/cancel`, body: { reason: 'r' } },
      { method: 'POST', path: `${run}/handoff`, body: { to_agent: target.agentId, context: {} } },
      { method: 'POST', path: '/v1/ui/login-codes', body: {} }
    ]
  }

  const expectTyped = (status: number, body: unknown, what: string): void => {
    expect(status, what).toBeLessThan(500)
    if (status >= 400) expect(isError(body), `${what}: ${JSON.stringify(body).slice(0, 200)}`).toBe(true)
  }

  it('mutated bodies of every body route', async () => {
    const all = seeds()
    const statuses = new Set<number>()
    await fc.assert(fc.asyncProperty(fc.constantFrom(...all), mutation, async (s, m) => {
      const body = JSON.stringify(mutate(s.body, m))
      const res = await raw(`${api.url}${s.path}`, { method: s.method, token, body })
      expectTyped(res.status, res.body, `${s.method} ${s.path} ${body.slice(0, 120)}`)
      statuses.add(res.status)
    }), { numRuns: RUNS * all.length })
    // the bodies reached the handlers, not only the schema check (404: the run is unknown; 2xx: a card or a code)
    expect([...statuses].some(s => s !== 400)).toBe(true)
    expect(statuses.has(400)).toBe(true)
  })

  it('arbitrary JSON and arbitrary text as bodies', async () => {
    const all = seeds()
    await fc.assert(fc.asyncProperty(fc.constantFrom(...all), fc.oneof(json.map(v => JSON.stringify(v)), fc.string({ maxLength: 60 })), async (s, body) => {
      const res = await raw(`${api.url}${s.path}`, { method: s.method, token, body })
      expectTyped(res.status, res.body, `${s.method} ${s.path} ${body.slice(0, 120)}`)
    }), { numRuns: RUNS * 4 })
  })

  it('arbitrary run ids and query strings', async () => {
    await fc.assert(fc.asyncProperty(fc.string({ maxLength: 40 }), fc.string({ maxLength: 30 }), async (id, q) => {
      const run = await raw(`${api.url}/v1/runs/${encodeURIComponent(id)}`, { token })
      expectTyped(run.status, run.body, `GET run ${id}`)
      const discover = await raw(`${api.url}/v1/discover?capability=${encodeURIComponent(q)}&tag=${encodeURIComponent(q)}`, { token })
      expectTyped(discover.status, discover.body, `discover ${q}`)
      const list = await raw(`${api.url}/v1/runs?state=${encodeURIComponent(q)}&limit=${encodeURIComponent(q)}`, { token })
      expectTyped(list.status, list.body, `list ${q}`)
    }), { numRuns: RUNS * 2 })
  })
})
