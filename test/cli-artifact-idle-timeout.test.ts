/**
 * `artifact put` and `artifact get` had no time bound at all: a node that read
 * the upload and never answered, or never answered (or stopped sending) a
 * download, held the command forever. Now a connection with nothing sent or
 * received for the client's request time fails with the TIMEOUT ApiError, the
 * error (and exit 1) of a JSON call the node does not answer in time. The
 * client is given a short time here (the CLI's is CLI_REQUEST_TIMEOUT_MS).
 *
 * The wait for a download's head is not bounded: the node fetches the whole
 * artifact from its holders before its first byte (every error comes before
 * it), which takes as long as the artifact is large (128 MiB at 1 MiB/s is
 * over 2 minutes). Only the caller's signal (Ctrl-C) ends that wait; once the
 * head has come, each read of the body is bounded.
 */
import { createServer, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient, ApiError } from '../src/api/client.ts'

const TIMEOUT_MS = 300
/** How long the node playing a slow fetch holds the head, by its own timer: several of the client's idle times. */
const FETCHING_MS = TIMEOUT_MS * 4
const ARTIFACT = Buffer.from('the artifact, fetched from its holders at last')

describe('artifact transfers to a node that goes silent', () => {
  let server: Server
  let url: string
  const held: ServerResponse[] = []
  let uploaded = 0
  const silentAsked: Array<() => void> = []
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
      } else if (req.url?.includes('/fetching') === true) {
        // a healthy node still fetching from the holders: no byte until it has the whole artifact
        const fetched = setTimeout(() => {
          res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(ARTIFACT.byteLength) })
          res.end(ARTIFACT)
        }, FETCHING_MS)
        res.on('close', () => { clearTimeout(fetched) })
      } else {
        // no head ever
        for (const f of silentAsked.splice(0)) f()
      }
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

  it('a download waits for its head while the node is still fetching, past the client\'s idle time', async () => {
    const client = new ApiClient(url, 't', { timeoutMs: TIMEOUT_MS })
    const got = await client.download('/v1/artifacts/fetching')
    expect(got.size).toBe(ARTIFACT.byteLength)
    const pieces: Uint8Array[] = []
    const reader = got.body.getReader()
    for (let r = await reader.read(); !r.done; r = await reader.read()) pieces.push(r.value)
    expect(Buffer.concat(pieces).equals(ARTIFACT)).toBe(true)
  }, 15_000)

  it('a download whose head never comes ends with the caller\'s signal (Ctrl-C), not by itself', async () => {
    const client = new ApiClient(url, 't', { timeoutMs: TIMEOUT_MS })
    const ctl = new AbortController()
    const asked = new Promise<void>(resolve => { silentAsked.push(resolve) })
    const pending = errorOf(client.download('/v1/artifacts/silent', undefined, ctl.signal))
    await asked
    ctl.abort()
    const err = await pending
    expect(err).toBeInstanceOf(Error)
    expect(err).not.toBeInstanceOf(ApiError)
    expect((err as Error).name).toBe('AbortError')
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
