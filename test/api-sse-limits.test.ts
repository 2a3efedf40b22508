/**
 * The SSE streams' own limits, on real sockets: the keep-alive comment on an
 * idle stream, the cut-off of a client that stops reading (its unread output
 * is bounded, its stream slot and subscription are released), and that a
 * client that reads is never cut off by the same volume.
 */
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { SseStream } from '../src/api/sse.ts'
import { until } from './helpers.ts'

interface Harness { server: Server, url: string, streams: SseStream[] }

let harness: Harness | undefined
afterEach(async () => {
  for (const s of harness?.streams ?? []) s.close()
  await new Promise<void>(resolve => { harness?.server.close(() => { resolve() }) ?? resolve() })
  harness?.server.closeAllConnections()
  harness = undefined
})

async function serve (limits: ConstructorParameters<typeof SseStream>[1]): Promise<Harness> {
  const streams: SseStream[] = []
  const server = createServer((_req, res: ServerResponse) => { streams.push(new SseStream(res, limits)) })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  harness = { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, streams }
  return harness
}

/** A client of the stream: its response, the text it read, and whether its connection ended. */
async function connect (url: string): Promise<{ res: IncomingMessage, text: () => string, ended: () => boolean }> {
  return new Promise((resolve, reject) => {
    let text = ''
    let ended = false
    const req = request(url, (res) => {
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { text += chunk })
      res.on('close', () => { ended = true })
      res.on('error', () => { ended = true })
      resolve({ res, text: () => text, ended: () => ended })
    })
    req.on('error', (err) => { ended = true; reject(err) })
    req.end()
  })
}

const EVENT = { blob: 'x'.repeat(16 * 1024) }

describe('SSE stream limits', () => {
  it('sends a keep-alive comment on an idle stream every heartbeat, and stops when the stream ends', async () => {
    const h = await serve({ heartbeatMs: 50 })
    const client = await connect(h.url)
    await until(() => client.text().split(': keep-alive\n\n').length > 3, 'three keep-alive comments')
    const sse = h.streams[0]
    expect(sse).toBeDefined()
    let closers = 0
    sse?.onClose(() => { closers++ })
    sse?.close()
    await until(() => client.ended(), 'the client to see the end')
    expect(closers).toBe(1)
    expect(sse?.cutOff).toBe(false)
  })

  it('cuts off a client that stops reading once its unread output passes the bound, runs the closers once, and writes nothing after', async () => {
    const max = 64 * 1024
    const h = await serve({ maxBufferedBytes: max, heartbeatMs: 60_000 })
    const client = await connect(h.url)
    client.res.pause() // the client stops reading: TCP pushes back, then the response buffers
    await until(() => h.streams.length === 1, 'the stream')
    const sse = h.streams[0] as SseStream
    let closers = 0
    sse.onClose(() => { closers++ })
    const res = (sse as unknown as { res: ServerResponse }).res
    let sent = 0
    let maxBuffered = 0
    // bounded: the kernel's socket buffers take a few MB at most before the response buffers
    for (let i = 0; i < 20_000 && !sse.closed; i++) {
      maxBuffered = Math.max(maxBuffered, res.writableLength)
      sse.send('item', EVENT, i)
      sent++
      if (i % 16 === 15) await new Promise(resolve => setImmediate(resolve))
    }
    expect(sse.closed).toBe(true)
    expect(sse.cutOff).toBe(true)
    expect(closers).toBe(1)
    // the node held at most the bound plus one event for this client
    expect(maxBuffered).toBeLessThanOrEqual(max + JSON.stringify(EVENT).length + 64)
    sse.send('item', EVENT, sent) // a write after the cut is a no-op
    expect(closers).toBe(1)
    client.res.resume()
    await until(() => client.ended(), 'the client to see its connection cut')
  })

  it('does not cut off a client over the backlog it is sent on connecting; past that backlog the bound holds again', async () => {
    const max = 64 * 1024
    const h = await serve({ maxBufferedBytes: max, heartbeatMs: 60_000 })
    const client = await connect(h.url)
    client.res.pause()
    await until(() => h.streams.length === 1, 'the stream')
    const sse = h.streams[0] as SseStream
    const res = (sse as unknown as { res: ServerResponse }).res
    // a 2 MB backlog at once: far over the bound, and the client has read none of it yet
    sse.burst(() => { for (let i = 0; i < 128; i++) sse.send('item', EVENT, i) })
    expect(sse.closed).toBe(false)
    const floor = res.writableLength
    expect(floor).toBeGreaterThan(max)
    // the client still reads nothing: live events are bounded above the unread backlog
    let maxBuffered = 0
    for (let i = 128; i < 20_000 && !sse.closed; i++) {
      maxBuffered = Math.max(maxBuffered, res.writableLength)
      sse.send('item', EVENT, i)
      if (i % 16 === 15) await new Promise(resolve => setImmediate(resolve))
    }
    expect(sse.cutOff).toBe(true)
    expect(maxBuffered).toBeLessThanOrEqual(floor + max + JSON.stringify(EVENT).length + 64)
  })

  it('never cuts off a client that reads, however much it is sent', async () => {
    const max = 64 * 1024
    const h = await serve({ maxBufferedBytes: max, heartbeatMs: 60_000 })
    const client = await connect(h.url)
    await until(() => h.streams.length === 1, 'the stream')
    const sse = h.streams[0] as SseStream
    const res = (sse as unknown as { res: ServerResponse }).res
    // 8 MB, written as fast as the socket drains
    for (let i = 0; i < 512; i++) {
      sse.send('item', EVENT, i)
      if (res.writableLength > max / 2) {
        await until(() => res.writableLength <= max / 2 || sse.closed, 'the socket to drain', 30_000)
      }
    }
    expect(sse.cutOff).toBe(false)
    await until(() => client.text().endsWith('id: 511\n' + `data: ${JSON.stringify(EVENT)}\n\n`), 'the last event at the client', 30_000)
    expect(sse.closed).toBe(false)
    expect(sse.cutOff).toBe(false)
  })
})
