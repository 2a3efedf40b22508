/**
 * The metrics port holds at most METRICS_MAX_CONNECTIONS connections: past
 * it a new one is closed as it comes. Found by session 57's review: the port
 * had no bound (1524 sockets were accepted and held).
 */
import { connect, type Socket } from 'node:net'
import { afterAll, expect, it } from 'vitest'
import { METRICS_MAX_CONNECTIONS } from '../src/api/constants.ts'
import { NodeMetrics, serveMetrics } from '../src/api/metrics.ts'

const sockets: Socket[] = []
let served: Awaited<ReturnType<typeof serveMetrics>> | undefined
afterAll(async () => {
  for (const s of sockets) s.destroy()
  await served?.close()
})

/** A socket to `port`, once connected (or closed as it came). */
async function open (port: number): Promise<Socket> {
  const s = connect(port, '127.0.0.1')
  sockets.push(s)
  await new Promise<void>(resolve => { s.once('connect', () => { resolve() }); s.once('close', () => { resolve() }) })
  return s
}

/** Ask `s` for the metrics: the status line of its answer, or 'closed' when none came. */
async function ask (s: Socket, port: number): Promise<string> {
  let text = ''
  const answer = new Promise<string>((resolve) => {
    s.on('data', (d: Buffer) => {
      text += d.toString()
      if (text.includes('\r\n')) resolve(text.split('\r\n')[0] ?? '')
    })
    s.on('close', () => { resolve('closed') })
  })
  // a socket the server closed as it came may be reset under the write: its close is the answer
  let resets = 0
  s.on('error', () => { resets++ })
  if (!s.destroyed) s.write(`GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`)
  const line = await answer
  return resets > 0 && line !== 'closed' ? `${line} (reset)` : line
}

it('closes connections past METRICS_MAX_CONNECTIONS as they come; those within are served', async () => {
  served = await serveMetrics(new NodeMetrics(), '127.0.0.1', 0)
  const port = Number(new URL(served.url).port)
  const extra = 16
  // every socket is open before any asks: the server holds them all at once (answered ones stay open, keep-alive)
  const all = await Promise.all(Array.from({ length: METRICS_MAX_CONNECTIONS + extra }, async () => open(port)))
  const lines = await Promise.all(all.map(async s => ask(s, port)))
  expect(lines.filter(l => l === 'closed')).toHaveLength(extra)
  expect(lines.filter(l => l === 'HTTP/1.1 200 OK')).toHaveLength(METRICS_MAX_CONNECTIONS)
  expect(served.droppedConnections()).toBe(extra)
}, 60_000)
