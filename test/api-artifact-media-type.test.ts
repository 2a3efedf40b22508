/**
 * GET /v1/artifacts/{artifact}?media_type=... with a media type the schema
 * took (anything after `;`) but Node refuses in a header (a control or
 * non-ASCII character) was answered 500 INTERNAL. MediaType's parameters are
 * now header-safe characters only (protocols/artifact.schema.json), so such
 * a value is a typed 400, and the read opened for the answer is not left
 * open. Found by session 46's review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'

describe('the media_type of a download', () => {
  let nodes: MeshNode[]
  let api: ApiServer
  let token: string
  beforeAll(async () => {
    nodes = await startMesh(1)
    token = newToken()
    api = await startApiServer(nodes[0]!, { token, port: 0, checkResponses: true })
  })
  afterAll(async () => { await api.close(); await stopAll(nodes) })

  it('is refused (400 INVALID_REQUEST) when a header cannot carry it; a header-safe one is served', async () => {
    const client = new ApiClient(api.url, token)
    const { part } = await client.upload<{ part: { artifact: string } }>('/v1/artifacts', (async function * () { yield new TextEncoder().encode('hello') })(), 'text/plain')
    for (const bad of ['text/plain;%0b', 'text/plain;%00', 'text/plain; name=%C4%80', 'text/plain;%7f']) {
      const r = await raw(`${api.url}/v1/artifacts/${part.artifact}?media_type=${bad}`, { token })
      expect(r.status, bad).toBe(400)
      expect((r.body as { error: { code: string } }).error.code).toBe('INVALID_REQUEST')
    }
    const ok = await raw(`${api.url}/v1/artifacts/${part.artifact}?media_type=${encodeURIComponent('text/plain; charset=utf-8')}`, { token })
    expect(ok.status).toBe(200)
    expect(ok.headers.get('content-type')).toBe('text/plain; charset=utf-8')
    // nothing is left being read: the artifact can be removed at once
    expect((await client.call<{ freed_bytes: number }>('DELETE', `/v1/artifacts/${part.artifact}`)).freed_bytes).toBeGreaterThan(0)
  })
})
