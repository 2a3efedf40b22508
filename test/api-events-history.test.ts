/**
 * An event stream whose correlation holds more history than a client may
 * leave unread (API_SSE_MAX_BUFFERED_BYTES, lowered here): the history is
 * the backlog a client is sent on connecting, which it has had no chance to
 * read, so it does not count against the cut-off (as the work stream's
 * backlog does not). Before, the history went out under the cut-off and
 * such a stream was destroyed before `ready`, on every reconnect. Since
 * session 35 the history is also sent no faster than the client reads it
 * (API_SSE_HISTORY_HIGH_WATER_BYTES unread at most), read from the log a page
 * at a time; before, all of it was read into memory and written at once.
 */
import { request, type IncomingMessage } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { API_SSE_HISTORY_HIGH_WATER_BYTES } from '../src/api/constants.ts'
import { EVENT_MAX_BYTES } from '../src/constants.ts'
import { ApiClient } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { Stream } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:long-history', version: '1.0.0' }
const STEPS = 160
// about 28 KiB each: 160 of them are about 4.4 MiB, more than a loopback socket takes at once
const CHUNK = 'h'.repeat(28 * 1024)
const MAX_BUFFERED = 64 * 1024

describe('an event stream with a long history', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  let client: ApiClient
  let token: string
  let correlation = ''
  const streams: Stream[] = []

  beforeAll(async () => {
    nodes = await startMesh(2)
    const [a, b] = nodes as [MeshNode, MeshNode]
    b.runs.handle(CAP, async (ctx) => {
      for (let i = 0; i < STEPS; i++) await ctx.progress({ step: i, chunk: CHUNK })
      return { done: true }
    })
    await b.publishCard({ name: 'talkative', capabilities: [CAP] })
    token = newToken()
    api = await startApiServer(a, { token, port: 0, sse: { maxBufferedBytes: MAX_BUFFERED } })
    client = new ApiClient(api.url, token)
  })
  afterAll(async () => {
    await Promise.all(streams.map(async s => s.close()))
    await api.close()
    await stopAll(nodes)
  })

  it('sends the whole history, then ready, whatever its size', async () => {
    const [a, b] = nodes as [MeshNode, MeshNode]
    const run = await a.delegate({ to_agent: b.agentId, task_id: 'task-long-history', capability: CAP, input: {} })
    await until(async () => (await a.runs.store.getOutgoing(run.run_id))?.state === 'completed', 'the run to complete', 60_000)
    await until(async () => (await a.events.lastEvent(run.run_id))?.type === 'run.completed', 'every event held by the delegator', 60_000)
    correlation = run.correlation_id
    const s = new Stream(client, `/v1/events/${encodeURIComponent(run.correlation_id)}/stream`)
    streams.push(s)
    await s.ready()
    const types = s.events.filter(e => e.event !== 'ready').map(e => e.event)
    expect(types[0]).toBe('run.started')
    expect(types.filter(t => t === 'run.progress')).toHaveLength(STEPS)
    expect(types.at(-1)).toBe('run.completed')
  })

  it('sends the history at the pace its client reads: never more than a high-water mark unread', async () => {
    expect(correlation).not.toBe('')
    const waitsBefore = api.stats().eventStreams.historyWaits
    const openBefore = api.stats().streams
    // a client that takes the response and does not read it
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = request(`${api.url}/v1/events/${encodeURIComponent(correlation)}/stream`, { headers: { authorization: `Bearer ${token}` } })
      req.on('response', (r) => { r.pause(); resolve(r) })
      req.on('error', reject)
      req.end()
    })
    expect(res.statusCode).toBe(200)
    // the stream filled what the sockets take, then waits for its client instead of reading more of the log
    await until(() => api.stats().eventStreams.historyWaits > waitsBefore, 'the stream to wait for its client', 30_000)
    const unread = api.stats().sseBufferedBytes
    expect(unread).toBeLessThanOrEqual(API_SSE_HISTORY_HIGH_WATER_BYTES + EVENT_MAX_BYTES * 2)
    // reading again, the client gets every event and then ready
    let text = ''
    res.setEncoding('utf8')
    const ready = new Promise<void>((resolve, reject) => {
      res.on('data', (chunk: string) => {
        text += chunk
        if (text.includes('event: ready')) resolve()
      })
      res.on('end', () => { reject(new Error('stream ended before ready')) })
    })
    res.resume()
    await ready
    res.destroy()
    const names = [...text.matchAll(/^event: (.+)$/gm)].map(m => m[1])
    expect(names.filter(n => n === 'run.progress')).toHaveLength(STEPS)
    expect(names.indexOf('ready')).toBe(names.length - 1)
    expect(api.stats().eventStreams.failed).toBe(0)
    await until(() => api.stats().streams === openBefore, 'the server to close the stream the client left')
  })
})
