/**
 * What bounds the API's sockets. Found by session 49's review: fastify's
 * requestTimeout defaults to none, so a request whose body never finished
 * held its socket for good, even without a token (the 401 went out and the
 * server went on reading the body). A request now has API_REQUEST_TIMEOUT_MS
 * to arrive, a refusal sent before the body was read closes the socket, and
 * at most API_MAX_CONNECTIONS are open at once. SSE answers are not bound.
 */
import { connect, type Socket } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const REQUEST_TIMEOUT_MS = 500
const HEARTBEAT_MS = 50

/** A raw socket to the API: what it received, and whether the server closed it. */
interface RawSocket { sock: Socket, got: () => string, closed: () => boolean }

async function open (url: string): Promise<RawSocket> {
  const u = new URL(url)
  const sock = connect(Number(u.port), u.hostname)
  let got = ''
  let closed = false
  sock.on('data', (d: Buffer) => { got += d.toString() })
  sock.on('close', () => { closed = true })
  // the server may reset a socket it closed while the client still writes
  sock.on('error', () => { closed = true })
  await new Promise<void>((resolve, reject) => {
    sock.once('connect', () => { resolve() })
    sock.once('error', reject)
  })
  return { sock, got: () => got, closed: () => closed }
}

/** The head of a POST whose body is announced at 100,000 bytes; only its first bytes follow. */
function slowPost (url: string, token: string | null): string {
  const u = new URL(url)
  const auth = token === null ? '' : `authorization: Bearer ${token}\r\n`
  return `POST /v1/delegate HTTP/1.1\r\nhost: ${u.host}\r\n${auth}content-type: application/json\r\ncontent-length: 100000\r\n\r\n{"to_agent":`
}

describe('the bounds of the API\'s sockets', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  let few: ApiServer
  let token: string
  const sockets: RawSocket[] = []

  beforeAll(async () => {
    nodes = await startMesh(1)
    token = newToken()
    api = await startApiServer(nodes[0]!, { token, port: 0, requestTimeoutMs: REQUEST_TIMEOUT_MS, sse: { heartbeatMs: HEARTBEAT_MS } })
    few = await startApiServer(nodes[0]!, { token, port: 0, maxConnections: 2 })
  })

  afterAll(async () => {
    for (const s of sockets) s.sock.destroy()
    await api.close()
    await few.close()
    await stopAll(nodes)
  })

  async function socket (url: string): Promise<RawSocket> {
    const s = await open(url)
    sockets.push(s)
    return s
  }

  it('answers a request without a token 401 and closes its socket, without waiting for the body', async () => {
    const s = await socket(api.url)
    s.sock.write(slowPost(api.url, null))
    await until(() => s.closed(), 'the server to close the socket')
    expect(s.got().split('\r\n')[0]).toBe('HTTP/1.1 401 Unauthorized')
    expect(s.got().toLowerCase()).toContain('connection: close')
  })

  it('answers a request whose body does not arrive in time 408 and closes its socket', async () => {
    const s = await socket(api.url)
    s.sock.write(slowPost(api.url, token))
    await until(() => s.closed(), 'the server to close the socket')
    expect(s.got().split('\r\n')[0]).toBe('HTTP/1.1 408 Request Timeout')
  })

  it('keeps an SSE stream open long past the request timeout', async () => {
    const s = await socket(api.url)
    const u = new URL(api.url)
    s.sock.write(`GET /v1/work/stream HTTP/1.1\r\nhost: ${u.host}\r\nauthorization: Bearer ${token}\r\naccept: text/event-stream\r\n\r\n`)
    // keep-alives for four request timeouts (the server looks for late requests once per timeout)
    const wanted = 4 * REQUEST_TIMEOUT_MS / HEARTBEAT_MS
    await until(() => s.closed() || s.got().split(': keep-alive').length > wanted, 'keep-alives for four request timeouts')
    expect(s.closed()).toBe(false)
    expect(s.got().split('\r\n')[0]).toBe('HTTP/1.1 200 OK')
  })

  it('closes connections past its bound as they come, and takes new ones once one closed', async () => {
    const held = [await socket(few.url), await socket(few.url)]
    const third = await socket(few.url)
    await until(() => third.closed(), 'the connection past the bound to be closed')
    expect(third.got()).toBe('')
    expect(few.stats().droppedConnections).toBe(1)
    expect(held.some(s => s.closed())).toBe(false)
    held[0]!.sock.destroy()
    await until(async () => {
      try {
        return (await new ApiClient(few.url, token).call<{ agent_id: string }>('GET', '/v1/node')).agent_id === nodes[0]!.agentId
      } catch {
        // refused while the server has not yet seen the closed socket go
        return false
      }
    }, 'a new connection to be served')
  })
})
