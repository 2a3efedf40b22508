/**
 * Replays and timelines may each read up to REPLAY_MAX_BYTES of events into
 * memory. Found by session 57's review: they had no bound on how many ran at
 * once (200 concurrent replays were all in flight), and an answer its client
 * never read was held in the socket for good. Now they share
 * API_REPLAYS_CONCURRENT_MAX slots (429, reason `too_many_replays`, past
 * them) and an answer its client takes none of for API_ANSWER_IDLE_MS is cut
 * off with its socket.
 *
 * The idle cut-off of unread answers (API_ANSWER_IDLE_MS) is the socket's
 * inactivity timeout, armed when an answer goes out. With HTTP keep-alive
 * pipelining the next request's answer waits in a queue while the one before
 * is sent, and takes the socket as that one left it: with its idle bound
 * armed. A handler that took longer (a replay that reads, a delegation) had
 * its socket destroyed under it, its answer never sent: the timeout found no
 * listener on the queued answer and Node destroyed the socket.
 */
import { connect, type Socket } from 'node:net'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { API_REPLAYS_CONCURRENT_MAX } from '../src/api/constants.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { BIG_REPLAY_BYTES, bigReplays, raw, type Raw } from './api-helpers.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

/** Short, so the unread answer is cut off soon; a client that reads is never this idle on loopback. */
const IDLE_MS = 1_000

/** The answers' status lines seen so far on a raw connection. */
function statuses (text: string): number[] {
  return [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map(m => Number(m[1]))
}

describe('replays and timelines', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer | undefined
  const clients: Socket[] = []

  afterEach(async () => {
    for (const c of clients.splice(0)) c.destroy()
    vi.restoreAllMocks()
    await api?.close()
    await stopAll(nodes)
  })

  it('take at most API_REPLAYS_CONCURRENT_MAX slots together; past them 429 too_many_replays; the slots come back', async () => {
    nodes = await startLoneNodes(1)
    const node = nodes[0]!
    const token = newToken()
    api = await startApiServer(node, { token, port: 0, checkResponses: true })
    const url = api.url
    // every replay and timeline reads the correlation's events: held there until the gate opens
    let reading = 0
    const gate = Promise.withResolvers<void>()
    const read = node.events.readCorrelation.bind(node.events)
    vi.spyOn(node.events, 'readCorrelation').mockImplementation(async (id, maxBytes) => {
      reading++
      await gate.promise
      return read(id, maxBytes)
    })
    const max = API_REPLAYS_CONCURRENT_MAX
    const extra = 6
    const path = (i: number): string => i % 2 === 0 ? `/v1/events/task-${i}/replay?timeout_ms=0` : `/v1/events/task-${i}/timeline?timeout_ms=0`
    const answered: Raw[] = []
    const all = Array.from({ length: max + extra }, async (_, i) => {
      const r = await raw(`${url}${path(i)}`, { token })
      answered.push(r)
      return r
    })
    // every request either reads (holding its slot) or was answered
    await until(() => reading + answered.length === max + extra, 'every request read or answered')
    const refused = [...answered]
    expect(refused.map(r => r.status)).toEqual(Array(extra).fill(429))
    for (const r of refused) expect(r.body.error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'too_many_replays', limit: max } })
    expect(reading).toBe(max)
    expect(api.stats().replays).toBe(max)

    gate.resolve()
    const statuses = (await Promise.all(all)).map(r => r.status)
    expect(statuses.filter(s => s === 200)).toHaveLength(max)
    // a slot is given back when its answer was sent
    await until(() => api!.stats().replays === 0, 'the slots given back')
    const again = await Promise.all(Array.from({ length: max }, async (_, i) => raw(`${url}${path(i)}`, { token })))
    expect(again.map(r => r.status)).toEqual(Array(max).fill(200))
    expect(api.stats().replays).toBe(0)
  }, 60_000)

  it('an answer its client never reads is cut off with its socket; one that is read is not', async () => {
    nodes = await startLoneNodes(1)
    const node = nodes[0]!
    const token = newToken()
    api = await startApiServer(node, { token, port: 0, answerIdleMs: IDLE_MS })
    const port = Number(new URL(api.url).port)
    // a replay of 24 MiB of events: far more than the sockets' buffers take
    bigReplays(node)

    // a client that reads takes it all
    const read = await fetch(`${api.url}/v1/events/task-1/replay?timeout_ms=0`, { headers: { authorization: `Bearer ${token}` } })
    const whole = (await read.arrayBuffer()).byteLength
    expect(read.status).toBe(200)
    expect(whole).toBeGreaterThan(BIG_REPLAY_BYTES)
    expect(api.stats().idleAnswers).toBe(0)

    // one that never reads
    const c = connect(port, '127.0.0.1')
    clients.push(c)
    c.pause()
    await new Promise(resolve => c.once('connect', resolve))
    c.write(`GET /v1/events/task-1/replay?timeout_ms=0 HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${token}\r\n\r\n`)
    await until(() => api!.stats().idleAnswers === 1, 'the unread answer cut off')
    // what the socket had taken before it was closed comes, then its end: not the whole answer
    let got = 0
    c.on('data', (d: Buffer) => { got += d.length })
    const closed = new Promise<void>(resolve => c.once('close', () => { resolve() }))
    let resets = 0
    c.on('error', () => { resets++ }) // a reset is an end too: the close that follows is awaited
    c.resume()
    await closed
    expect(got).toBeLessThan(whole)
    expect(api.stats().replays).toBe(0)
  }, 60_000)

  async function open (port: number): Promise<{ socket: Socket, text: () => string, closed: () => boolean }> {
    const socket = connect(port, '127.0.0.1')
    clients.push(socket)
    let text = ''
    let closed = false
    socket.on('data', (d: Buffer) => { text += d.toString('latin1') })
    socket.on('close', () => { closed = true })
    socket.on('error', () => { closed = true }) // a reset ends it as a close does
    await new Promise(resolve => socket.once('connect', resolve))
    return { socket, text: () => text, closed: () => closed }
  }

  it('a pipelined request is answered though its handler outlasts the idle bound armed for the answer before it', async () => {
    nodes = await startLoneNodes(1)
    const node = nodes[0]!
    const token = newToken()
    api = await startApiServer(node, { token, port: 0, answerIdleMs: IDLE_MS })
    const port = Number(new URL(api.url).port)
    const gate = Promise.withResolvers<void>()
    let slowStarted = false
    // `slow` waits for the gate; `big` is 24 MiB, far more than the sockets' buffers take
    bigReplays(node, {
      big: id => id === 'task-big',
      before: async (id) => {
        if (id !== 'task-slow') return
        slowStarted = true
        await gate.promise
      }
    })
    const head = (path: string): string => `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${token}\r\n\r\n`

    // two requests back to back on one connection: the first answered at once, the second held
    const a = await open(port)
    a.socket.write(head('/v1/node') + head('/v1/events/task-slow/replay?timeout_ms=0'))
    await until(() => slowStarted && statuses(a.text()).length === 1, 'the first answered, the second in its handler')

    // a clock: an answer whose client never reads, sent after the first was, is cut off after the idle bound;
    // the bound armed for the first (same length, armed earlier) has run out by then
    const clock = await open(port)
    clock.socket.pause()
    clock.socket.write(head('/v1/events/task-big/replay?timeout_ms=0'))
    await until(() => api!.stats().idleAnswers === 1, 'the unread answer cut off')

    gate.resolve()
    await until(() => statuses(a.text()).length === 2 || a.closed(), 'the second answer, or the connection closed')
    expect(statuses(a.text())).toEqual([200, 200])
    expect(a.closed()).toBe(false)
    expect(api.stats().idleAnswers).toBe(1)
  }, 60_000)

  it('a pipelined request whose answer its client never reads is still cut off', async () => {
    nodes = await startLoneNodes(1)
    const node = nodes[0]!
    const token = newToken()
    api = await startApiServer(node, { token, port: 0, answerIdleMs: IDLE_MS })
    const port = Number(new URL(api.url).port)
    bigReplays(node)
    const head = (path: string): string => `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${token}\r\n\r\n`
    const a = await open(port)
    a.socket.pause()
    a.socket.write(head('/v1/node') + head('/v1/events/task-1/replay?timeout_ms=0'))
    await until(() => api!.stats().idleAnswers === 1, 'the unread queued answer cut off')
    a.socket.resume()
    await until(() => a.closed(), 'the connection closed')
    expect(api.stats().replays).toBe(0)
  }, 60_000)
})
