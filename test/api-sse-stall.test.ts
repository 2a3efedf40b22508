/**
 * A client that stops reading an SSE stream is cut off once it has taken
 * nothing for the stall bound (API_SSE_STALL_MS), and its stream slot and
 * subscription are released. Found by session 49's review: the history waits
 * for a `drain` that never comes, and after each history burst only
 * keep-alives counted against the byte bound, so a stalled stream held its
 * slot for about ten days. A client that reads, however slowly, keeps its
 * stream.
 */
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { SseStream, type SseLimits } from '../src/api/sse.ts'
import type { MeshNode } from '../src/node.ts'
import { Stream } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const HEARTBEAT_MS = 20
/**
 * Seventy-five keep-alive periods (1.5 s): the slow reader below takes something about every quarter of it. At
 * twenty (400 ms) one pause of a loaded CI machine's event loop longer than the bound cut the reader off once.
 */
const STALL_MS = 75 * HEARTBEAT_MS
const KEEP_ALIVE = ': keep-alive\n\n'

/** A client that reads nothing once its response has come. */
async function pausedClient (url: string, token?: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = request(url, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } })
    req.on('response', (r) => { r.pause(); resolve(r) })
    req.on('error', reject)
    req.end()
  })
}

describe('an event stream whose client stops reading mid-history', () => {
  const CAP = { capability_id: 'cap:api-sse-stall', version: '1.0.0' }
  /** About 5 MB of history: more than the sockets' buffers take. */
  const STEPS = 180
  const CHUNK = 'h'.repeat(28 * 1024)
  let nodes: MeshNode[] = []
  let api: ApiServer
  let token: string
  const paused: IncomingMessage[] = []

  beforeAll(async () => {
    nodes = await startMesh(2)
    const b = nodes[1]!
    b.runs.handle(CAP, async (ctx) => {
      for (let i = 0; i < STEPS; i++) await ctx.progress({ step: i, chunk: CHUNK })
      return { done: true }
    })
    await b.publishCard({ name: 'talkative', capabilities: [CAP] })
    token = newToken()
    // one stream slot: a stalled stream that kept it would refuse every other
    api = await startApiServer(nodes[0]!, { token, port: 0, maxSseClients: 1, sse: { heartbeatMs: HEARTBEAT_MS, stallMs: STALL_MS } })
  }, 120_000)

  afterAll(async () => {
    for (const r of paused) r.destroy()
    await api.close()
    await stopAll(nodes)
  })

  it('is cut off after taking nothing for the stall bound: its slot and subscription are released', async () => {
    const [a, b] = nodes as [MeshNode, MeshNode]
    const run = await a.delegate({ to_agent: b.agentId, task_id: 'task-api-sse-stall', capability: CAP, input: {} })
    await until(async () => (await a.events.lastEvent(run.run_id))?.type === 'run.completed', 'every event held by the delegator', 60_000)
    const path = `/v1/events/${encodeURIComponent(run.correlation_id)}/stream`
    const res = await pausedClient(`${api.url}${path}`, token)
    paused.push(res)
    expect(res.statusCode).toBe(200)
    await until(() => api.stats().eventStreams.historyWaits > 0, 'the history to wait for its client', 30_000)
    expect(api.stats().streams).toBe(1)

    await until(() => api.stats().streams === 0, 'the stalled stream to be cut off', 30_000)
    const stats = api.stats()
    expect(stats.eventSubscriptions).toBe(0)
    expect(stats.stalledStreams).toBe(1)

    // its slot is free again: a client that reads gets the whole history
    const s = new Stream(new ApiClient(api.url, token), path)
    try {
      await s.ready()
      expect(s.events.filter(e => e.event === 'run.progress').length).toBe(STEPS)
    } finally {
      await s.close()
    }
  }, 120_000)
})

describe('the stall bound of one SSE stream', () => {
  let server: Server | undefined
  let stream: SseStream | undefined
  afterEach(async () => {
    stream?.close()
    stream = undefined
    const s = server
    server = undefined
    if (s === undefined) return
    // a client that never read holds its connection open: close() alone would wait for it
    s.closeAllConnections()
    await new Promise<void>(resolve => { s.close(() => { resolve() }) })
  })

  const EVENT = { blob: 'x'.repeat(16 * 1024) }

  /**
   * A stream with a client that has not read yet, and a backlog far past what
   * the sockets hold written to it; `ticks` counts its keep-alives.
   */
  async function backedUp (limits: SseLimits, fill = 8 * 1024 * 1024): Promise<{ sse: SseStream, client: IncomingMessage, ticks: () => number, topUp: () => void }> {
    let res: ServerResponse | undefined
    server = createServer((_req, r) => {
      res = r
      stream = new SseStream(r, limits)
    })
    await new Promise<void>(resolve => server?.listen(0, '127.0.0.1', resolve))
    const client = await pausedClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`)
    await until(() => stream !== undefined && res !== undefined, 'the stream')
    const sse = stream as SseStream
    const r = res as ServerResponse
    let ticks = 0
    const write = r.write.bind(r) as (chunk: unknown, ...rest: unknown[]) => boolean
    r.write = ((chunk: unknown, ...rest: unknown[]) => {
      if (chunk === KEEP_ALIVE) ticks++
      return write(chunk, ...rest)
    }) as typeof r.write
    // `fill` unread at the server (8 MB: past what the sockets between take, until a client that reads grows them)
    let id = 0
    const topUp = (): void => { sse.burst(() => { while (sse.buffered < fill) sse.send('item', EVENT, id++) }) }
    topUp()
    return { sse, client, ticks: () => ticks, topUp }
  }

  it('cuts off a client that takes nothing, once, and runs the closers once', async () => {
    const { sse, client } = await backedUp({ heartbeatMs: HEARTBEAT_MS, stallMs: STALL_MS })
    let closers = 0
    sse.onClose(() => { closers++ })
    let gone = false
    client.on('close', () => { gone = true })
    client.on('error', () => { gone = true })
    await until(() => sse.closed, 'the stalled stream to be cut off')
    expect(sse.stalled).toBe(true)
    expect(sse.cutOff).toBe(true)
    expect(closers).toBe(1)
    client.resume()
    await until(() => gone, 'the client to see its connection cut')
  })

  it('keeps a client that reads slowly: a little now and then, never all of it', async () => {
    // a client that reads grows its socket's receive buffer, on Linux up to 32 MiB (tcp_rmem) beside the server's
    // 4 MiB send buffer: 8 MiB unread could all go into them, and the stream then waited for nothing (seen once)
    const { sse, client, ticks, topUp } = await backedUp({ heartbeatMs: HEARTBEAT_MS, stallMs: STALL_MS }, 40 * 1024 * 1024)
    const stallTicks = STALL_MS / HEARTBEAT_MS
    let read = 0
    let target = 0
    client.on('data', (chunk: Buffer) => {
      read += chunk.length
      if (read >= target) client.pause()
    })
    client.pause()
    // four stall periods, the client reading 1 MiB about every quarter of one: far less than waits for it, and
    // in the middle of one big socket write (the backlog went out as one), which the socket finishes only much later
    while (ticks() < 4 * stallTicks) {
      const from = ticks()
      // a few keep-alives, or a quarter of the stall bound on the clock, whichever comes first: the bound is a
      // socket timeout in wall time, and on a busy machine the ticks come late
      const waitedFrom = performance.now()
      await until(() => ticks() >= from + stallTicks / 4 || performance.now() - waitedFrom >= STALL_MS / 4 || sse.closed, 'a few keep-alives')
      expect(sse.closed, 'a client that reads is not cut off').toBe(false)
      // output waited all along: the client never caught up
      expect(sse.buffered).toBeGreaterThan(0)
      target = read + 1024 * 1024
      client.resume()
      await until(() => read >= target || sse.closed, 'the client to read a little')
      expect(sse.closed, 'a client that reads is not cut off').toBe(false)
      // the client's socket grows as it reads: keep more waiting than it can hold
      topUp()
    }
    expect(sse.cutOff).toBe(false)
    expect(sse.stalled).toBe(false)
  }, 60_000)
})
