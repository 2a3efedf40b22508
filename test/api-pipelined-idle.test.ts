/**
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
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { bigReplays } from './api-helpers.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

/** Short, so a test waits little for it; a client that reads is never this idle on loopback. */
const IDLE_MS = 500

/** The answers' status lines seen so far on a raw connection. */
function statuses (text: string): number[] {
  return [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map(m => Number(m[1]))
}

describe('a pipelined request', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer | undefined
  const clients: Socket[] = []

  afterEach(async () => {
    for (const c of clients.splice(0)) c.destroy()
    vi.restoreAllMocks()
    await api?.close()
    await stopAll(nodes)
  })

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

  it('is answered though its handler outlasts the idle bound armed for the answer before it', async () => {
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

  it('whose answer its client never reads is still cut off', async () => {
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
