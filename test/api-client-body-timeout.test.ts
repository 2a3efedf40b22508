/**
 * A JSON answer whose body does not finish within the client's time was reported as "the node's answer was cut
 * before its end" (ApiAnswerBrokenError: the CLI's exit 3 UNREACHABLE) instead of the client's own TIMEOUT
 * (ApiError 504), which the same call gets when the head is late.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient, ApiError } from '../src/api/client.ts'

describe('a JSON answer whose body stalls past the client timeout', () => {
  let server: Server
  let url: string
  beforeAll(async () => {
    server = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.write('{"a":')
      // the rest never comes (a node busy writing a large replay, a slow link)
    })
    await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(async () => {
    server.closeAllConnections()
    await new Promise<void>(resolve => server.close(() => { resolve() }))
  })

  it('fails with the TIMEOUT ApiError, as a late head does', async () => {
    const client = new ApiClient(url, 't', { timeoutMs: 300 })
    const err = await client.call('GET', '/v1/node').then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(ApiError)
    expect((err as ApiError).code).toBe('TIMEOUT')
  })
})
