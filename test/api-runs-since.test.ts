/**
 * GET /v1/runs?since=: text the document's pattern admits but that names no
 * instant the run index can order by is refused (INVALID_REQUEST, reason
 * `bad_since`). Found by session 49's review: `2026-13-45T99:99:99Z` was read
 * as the epoch and every run was listed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient, ApiError } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:api-runs-since', version: '1.0.0' }

describe('the since of GET /v1/runs', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  let token: string
  let client: ApiClient
  beforeAll(async () => {
    nodes = await startMesh(2)
    const [a, b] = nodes as [MeshNode, MeshNode]
    b.runs.handle(CAP, async () => ({ done: true }))
    await b.publishCard({ name: 'quick', capabilities: [CAP] })
    const run = await a.delegate({ to_agent: b.agentId, task_id: 'task-api-runs-since', capability: CAP, input: {} })
    await until(async () => (await a.events.lastEvent(run.run_id))?.type === 'run.completed', 'the run to complete')
    token = newToken()
    api = await startApiServer(a, { token, port: 0, host: '127.0.0.1', checkResponses: true })
    client = new ApiClient(api.url, token)
  }, 60_000)
  afterAll(async () => {
    await api.close()
    await stopAll(nodes)
  })

  /** The runs listed since `since` (the node delegated the one run: it is on the delegated side). */
  async function list (since: string): Promise<{ runs: unknown[] }> {
    const answer = await client.call<{ executing: unknown[], delegated: unknown[] }>('GET', '/v1/runs', undefined, { since })
    return { runs: [...answer.executing, ...answer.delegated] }
  }

  it('an instant before the run lists it; one after it lists nothing', async () => {
    expect((await list('2000-01-01T00:00:00Z')).runs.length).toBe(1)
    expect((await list('1969-12-31T23:59:59Z')).runs.length).toBe(1)
    expect((await list('9999-12-31T23:59:59Z')).runs.length).toBe(0)
    expect((await list('2000-01-01T00:00:00.5+05:00')).runs.length).toBe(1)
  })

  it.each([
    ['month 13, hour 99', '2026-13-45T99:99:99Z'],
    ['February 30', '2026-02-30T00:00:00Z'],
    ['February 29 of a year with none', '2025-02-29T00:00:00Z'],
    ['a leap second', '2026-06-30T23:59:60Z'],
    ['past year 9999', '9999-12-31T23:59:59-01:00']
  ])('%s is refused with bad_since', async (_what, since) => {
    const res = await raw(`${api.url}/v1/runs?since=${encodeURIComponent(since)}`, { token })
    expect(res.status).toBe(400)
    expect(res.body.error.code).toBe('INVALID_REQUEST')
    expect(res.body.error.details).toEqual({ reason: 'bad_since' })
    const err = await list(since).then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(ApiError)
    expect((err as ApiError).code).toBe('INVALID_REQUEST')
  })

  it('February 29 of a leap year is an instant', async () => {
    expect((await list('2024-02-29T00:00:00Z')).runs.length).toBe(1)
  })
})
