/**
 * The router's own refusals answer as every other API error does. Found by
 * session 49's review: a path parameter past the router's bound (GET
 * /v1/runs/<600 characters>) and a malformed percent-escape in the path
 * skipped the API's error handler, so their body was fastify's own (414 and
 * 400, quoting the whole path) and ApiClient (the CLI, MCP) said INTERNAL
 * "HTTP 414". They come before the token check, as the router's errors
 * always did: they quote only the start of the path the client sent.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient, ApiError } from '../src/api/client.ts'
import { API_ERROR_PATH_MAX_CHARS, API_MAX_PARAM_CHARS } from '../src/api/constants.ts'
import { newToken } from '../src/api/files.ts'
import { componentValidator } from '../src/api/openapi.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'

const isError = componentValidator('Error')
const LONG_ID = 'a'.repeat(API_MAX_PARAM_CHARS + 88)

describe('the router\'s refusals', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  let token: string
  beforeAll(async () => {
    nodes = await startMesh(1)
    token = newToken()
    api = await startApiServer(nodes[0]!, { token, port: 0, host: '127.0.0.1', checkResponses: true })
  })
  afterAll(async () => {
    await api.close()
    await stopAll(nodes)
  })

  it('a path parameter past the router\'s bound is INVALID_REQUEST (param_too_long), quoting a bounded part of the path', async () => {
    const res = await raw(`${api.url}/v1/runs/${LONG_ID}`, { token })
    expect(res.status).toBe(400)
    expect(isError(res.body), JSON.stringify(res.body).slice(0, 200)).toBe(true)
    expect(res.body.error.code).toBe('INVALID_REQUEST')
    expect(res.body.error.details).toEqual({ reason: 'param_too_long', limit: API_MAX_PARAM_CHARS })
    expect(res.body.error.message).toContain('/v1/runs/aaa')
    expect(res.body.error.message.length).toBeLessThan(API_ERROR_PATH_MAX_CHARS + 100)
  })

  it('through ApiClient (what the CLI prints) it is INVALID_REQUEST, not INTERNAL', async () => {
    const client = new ApiClient(api.url, token)
    const err = await client.call('GET', `/v1/runs/${LONG_ID}`).then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(ApiError)
    expect((err as ApiError).code).toBe('INVALID_REQUEST')
    expect((err as ApiError).status).toBe(400)
  })

  it('a malformed percent-escape in the path is INVALID_REQUEST (bad_url)', async () => {
    const res = await raw(`${api.url}/v1/runs/%E0%A4%A`, { token })
    expect(res.status).toBe(400)
    expect(isError(res.body), JSON.stringify(res.body).slice(0, 200)).toBe(true)
    expect(res.body.error.code).toBe('INVALID_REQUEST')
    expect(res.body.error.details).toEqual({ reason: 'bad_url' })
  })

  it('a long malformed path is quoted only in part', async () => {
    // under the parameter bound, far over what a message quotes
    const res = await raw(`${api.url}/v1/runs/${'b'.repeat(API_MAX_PARAM_CHARS - 20)}%E0%A4%A`, { token })
    expect(res.status).toBe(400)
    expect(res.body.error.details).toEqual({ reason: 'bad_url' })
    expect(res.body.error.message.length).toBeLessThan(API_ERROR_PATH_MAX_CHARS + 100)
  })

  it('without a token the same answers come (before the token check) and say nothing but the path sent', async () => {
    const long = await raw(`${api.url}/v1/runs/${LONG_ID}`, {})
    expect(long.status).toBe(400)
    expect(long.body.error.details.reason).toBe('param_too_long')
    const bad = await raw(`${api.url}/v1/runs/%E0%A4%A`, {})
    expect(bad.status).toBe(400)
    expect(bad.body.error.details.reason).toBe('bad_url')
    // any other request without a token is still refused first
    const other = await raw(`${api.url}/v1/runs/${'a'.repeat(40)}`, {})
    expect(other.status).toBe(401)
  })

  it('a path no route has is quoted only in part too', async () => {
    const res = await raw(`${api.url}/v1/${'c'.repeat(4000)}`, { token })
    expect(res.status).toBe(404)
    expect(res.body.error.details).toEqual({ reason: 'no_route' })
    expect(res.body.error.message.length).toBeLessThan(API_ERROR_PATH_MAX_CHARS + 100)
  })
})
