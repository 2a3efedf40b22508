/**
 * `artifact put` and `artifact get` had no time bound at all: a node that read
 * the upload and never answered, or never answered (or stopped sending) a
 * download, held the command forever. Now a connection with nothing sent or
 * received for the client's request time fails with the TIMEOUT ApiError, the
 * error (and exit 1) of a JSON call the node does not answer in time. The
 * client is given a short time here (the CLI's is CLI_REQUEST_TIMEOUT_MS).
 */
import { createServer, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient, ApiError } from '../src/api/client.ts'

const TIMEOUT_MS = 300

describe('artifact transfers to a node that goes silent', () => {
  let server: Server
  let url: string
  const held: ServerResponse[] = []
  let uploaded = 0
  beforeAll(async () => {
    server = createServer((req, res) => {
      held.push(res)
      if (req.method === 'POST') {
        // takes the whole body, then never answers
        req.on('data', (chunk: Buffer) => { uploaded += chunk.byteLength })
        return
      }
      req.resume()
      if (req.url?.includes('/partial') === true) {
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': '1000' })
        res.write(Buffer.alloc(10))
      }
      // else: no head ever
    })
    await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(async () => {
    server.closeAllConnections()
    await new Promise<void>(resolve => server.close(() => { resolve() }))
  })

  async function errorOf (p: Promise<unknown>): Promise<unknown> {
    return p.then(() => undefined, (e: unknown) => e)
  }

  it('an upload the node read but never answers fails with TIMEOUT', async () => {
    const client = new ApiClient(url, 't', { timeoutMs: TIMEOUT_MS })
    const err = await errorOf(client.upload('/v1/artifacts', Readable.from([Buffer.alloc(4096)]), 'application/octet-stream'))
    expect(err).toBeInstanceOf(ApiError)
    expect((err as ApiError).code).toBe('TIMEOUT')
    expect(uploaded).toBe(4096)
  }, 15_000)

  it('a download whose head never comes fails with TIMEOUT', async () => {
    const client = new ApiClient(url, 't', { timeoutMs: TIMEOUT_MS })
    const err = await errorOf(client.download('/v1/artifacts/silent'))
    expect(err).toBeInstanceOf(ApiError)
    expect((err as ApiError).code).toBe('TIMEOUT')
  }, 15_000)

  it('a download whose body stops coming fails its read with TIMEOUT', async () => {
    const client = new ApiClient(url, 't', { timeoutMs: TIMEOUT_MS })
    const got = await client.download('/v1/artifacts/partial')
    const reader = got.body.getReader()
    const err = await errorOf((async () => { for (;;) if ((await reader.read()).done) return })())
    expect(err).toBeInstanceOf(ApiError)
    expect((err as ApiError).code).toBe('TIMEOUT')
  }, 15_000)
})
