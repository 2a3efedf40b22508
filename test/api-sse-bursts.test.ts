/**
 * The byte bound of an SSE stream across bursts (a backlog written at once,
 * exempt from the cut-off until the client has taken it). Found by session
 * 49's review: each burst set the bound's floor to everything unread at its
 * end, so output written outside bursts before it became exempt too, and a
 * client that read nothing could be made to hold the bound again after
 * every burst. And the floor was cleared only by a `drain`, which a burst
 * under the socket's high-water mark never asks for: a client that had read
 * such a burst still had it counted in its favour. Only a burst's own unread
 * bytes are exempt now, and only until the client takes them.
 */
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { SseStream } from '../src/api/sse.ts'
import { until } from './helpers.ts'

const MAX = 64 * 1024
const EVENT = { blob: 'x'.repeat(16 * 1024) }
/** One event as written: its text, its `event:`/`id:` lines and the chunk's framing. */
const EVENT_SLACK = JSON.stringify(EVENT).length + 64

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

/** A stream on a real socket, its response, and its client (reading, all it is sent goes to `text`; `cut`: its connection failed). */
async function open (): Promise<{ sse: SseStream, res: ServerResponse, client: IncomingMessage, text: () => string, cut: () => boolean }> {
  let res: ServerResponse | undefined
  server = createServer((_req, r) => {
    res = r
    stream = new SseStream(r, { maxBufferedBytes: MAX, heartbeatMs: 60_000 })
  })
  await new Promise<void>(resolve => server?.listen(0, '127.0.0.1', resolve))
  let text = ''
  let cut = false
  const client = await new Promise<IncomingMessage>((resolve, reject) => {
    const req = request(`http://127.0.0.1:${(server?.address() as AddressInfo).port}/`, (r) => {
      r.setEncoding('utf8')
      r.on('data', (chunk: string) => { text += chunk })
      // the server cuts the client off: what these tests expect
      r.on('error', () => { cut = true })
      resolve(r)
    })
    req.on('error', reject)
    req.end()
  })
  await until(() => stream !== undefined && res !== undefined, 'the stream')
  return { sse: stream as SseStream, res: res as ServerResponse, client, text: () => text, cut: () => cut }
}

describe('the byte bound of an SSE stream across bursts', () => {
  it('counts output written between bursts in full: a client that reads nothing is cut off once that passes the bound', async () => {
    const { sse, res, client } = await open()
    client.pause()
    let id = 0
    // 8 MB unread, past what the sockets between take: what they take comes out of this, and all written later stays unread
    sse.burst(() => { while (sse.buffered < 8 * 1024 * 1024) sse.send('item', EVENT, id++) })
    // bursts alone, however many, never cut the client off (a history that goes on)
    for (let round = 0; round < 8; round++) {
      await new Promise(resolve => setImmediate(resolve))
      sse.burst(() => { sse.send('item', EVENT, id++) })
    }
    expect(sse.closed).toBe(false)
    // a burst, then live events under the bound, again and again: the live output adds up
    let live = 0
    for (let round = 0; round < 16 && !sse.closed; round++) {
      await new Promise(resolve => setImmediate(resolve))
      sse.burst(() => { sse.send('item', EVENT, id++) })
      for (let i = 0; i < 3 && !sse.closed; i++) {
        // every live byte is still unread: the sockets took only from the first burst
        expect(res.writableLength).toBeGreaterThan(live)
        const before = res.writableLength
        sse.send('item', EVENT, id++)
        if (!sse.closed) live += res.writableLength - before
      }
    }
    expect(sse.cutOff, `live output unread when the rounds ended: ${live} bytes`).toBe(true)
    // the client held at most the bound plus one event of live output
    expect(live).toBeLessThanOrEqual(MAX + EVENT_SLACK)
  })

  it('stops counting a burst once the client has taken it', async () => {
    const { sse, res, client, text } = await open()
    // a backlog under the socket's high-water mark, which the client reads
    sse.burst(() => { sse.send('item', EVENT, 0); sse.send('item', EVENT, 1) })
    await until(() => text().includes('id: 1\n'), 'the client to read the backlog')
    await until(() => res.writableLength === 0, 'the backlog to leave the node')
    client.pause()
    // live events to a client that stopped reading: bounded as if there had been no backlog
    let maxBuffered = 0
    for (let i = 2; i < 20_000 && !sse.closed; i++) {
      maxBuffered = Math.max(maxBuffered, res.writableLength)
      sse.send('item', EVENT, i)
      if (i % 16 === 15) await new Promise(resolve => setImmediate(resolve))
    }
    expect(sse.cutOff).toBe(true)
    expect(maxBuffered).toBeLessThanOrEqual(MAX + EVENT_SLACK)
  })
})
