/**
 * The API client's event streams (the CLI's `send`, `events --follow`; MCP)
 * fail with TIMEOUT when the node sends nothing, not even its keep-alive, for
 * API_CLIENT_SSE_SILENCE_MS while the client waits: before, a node that froze
 * held them until Ctrl-C. A node that keeps sending keep-alives is waited for.
 */
import { createServer, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { ApiClient, ApiError } from '../src/api/client.ts'

const SILENCE_MS = 300
const KEEPALIVE_SILENCE_MS = 3_000

describe('an event stream from a node that sends nothing', () => {
  let server: Server | undefined
  const open = new Set<ServerResponse>()
  afterEach(async () => {
    for (const res of open) res.destroy()
    open.clear()
    await new Promise<void>(resolve => { server?.close(() => { resolve() }) ?? resolve() })
    server = undefined
  })

  /** A stand-in node on 127.0.0.1 whose event stream does what `serve` says. */
  async function node (serve: (res: ServerResponse) => void): Promise<ApiClient> {
    server = createServer((_req, res) => {
      open.add(res)
      serve(res)
    })
    await new Promise<void>(resolve => { server!.listen(0, '127.0.0.1', resolve) })
    return new ApiClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, 'token')
  }

  async function read (client: ApiClient, silenceMs = SILENCE_MS): Promise<{ events: number, err: unknown }> {
    let events = 0
    try {
      for await (const _ of client.stream('/v1/work/stream', undefined, { silenceMs })) events++
      return { events, err: undefined }
    } catch (err) {
      return { events, err }
    }
  }

  it('fails with TIMEOUT when its head never comes', async () => {
    const client = await node(() => {})
    const { err } = await read(client)
    expect(err).toBeInstanceOf(ApiError)
    expect((err as ApiError).code).toBe('TIMEOUT')
  })

  it('fails with TIMEOUT when it sends an event and then nothing', async () => {
    const client = await node(res => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('event: work\ndata: {}\n\n')
    })
    const { events, err } = await read(client)
    expect(events).toBe(1)
    expect((err as ApiError).code).toBe('TIMEOUT')
    expect((err as ApiError).message).toMatch(/sent nothing for 300 ms/)
  })

  it('is waited for while it sends keep-alives, however long between events', async () => {
    const client = await node(res => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      let beats = 0
      // keep-alives a thirtieth of the silence bound apart (a loaded machine's timers run late), for over a bound
      // and a half, then one event and the end
      const timer = setInterval(() => {
        res.write(': keep-alive\n\n')
        if (++beats === 50) {
          clearInterval(timer)
          res.end('event: work\ndata: {}\n\n')
        }
      }, KEEPALIVE_SILENCE_MS / 30)
      res.on('close', () => { clearInterval(timer) })
    })
    const { events, err } = await read(client, KEEPALIVE_SILENCE_MS)
    expect(err).toBeUndefined()
    expect(events).toBe(1)
  })
})
