/**
 * An event stream's history is written one burst per event (event-stream.ts),
 * and a burst that leaves unread bytes watches for the response's `drain`.
 * Found by session 49's review: each such burst added its own listener, and
 * a client that reads keeps the buffer under the socket's high-water mark,
 * so no `drain` came to remove them: one listener per history event, and
 * Node's MaxListenersExceededWarning. One pending listener is enough.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { SseStream } from '../src/api/sse.ts'
import type { MeshNode } from '../src/node.ts'
import { Stream } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:api-sse-drain', version: '1.0.0' }
/** Far more history events than Node's default of 10 listeners per event. */
const STEPS = 200

describe('the drain listeners of an event stream\'s history', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  let client: ApiClient
  const warnings: string[] = []
  const onWarning = (w: Error): void => { warnings.push(`${w.name}: ${w.message}`) }

  beforeAll(async () => {
    process.on('warning', onWarning)
    nodes = await startMesh(2)
    const b = nodes[1]!
    b.runs.handle(CAP, async (ctx) => {
      for (let i = 0; i < STEPS; i++) await ctx.progress({ step: i })
      return { done: true }
    })
    await b.publishCard({ name: 'chatty', capabilities: [CAP] })
    const token = newToken()
    api = await startApiServer(nodes[0]!, { token, port: 0 })
    client = new ApiClient(api.url, token)
  })

  afterAll(async () => {
    process.off('warning', onWarning)
    await api.close()
    await stopAll(nodes)
  })

  it('holds at most one drain listener of its own while its client reads the history', async () => {
    const [a, b] = nodes as [MeshNode, MeshNode]
    const run = await a.delegate({ to_agent: b.agentId, task_id: 'api-sse-drain', capability: CAP, input: {} })
    await until(async () => (await a.events.lastEvent(run.run_id))?.type === 'run.completed', 'every event of the run', 60_000)
    const s = new Stream(client, `/v1/events/${encodeURIComponent(run.correlation_id)}/stream`)
    try {
      await s.ready()
      expect(s.events.filter(e => e.event === 'run.progress').length).toBeGreaterThanOrEqual(STEPS)
      const streams = (api as unknown as { streams: Set<SseStream> }).streams
      expect(streams.size).toBe(1)
      for (const sse of streams) {
        // Node's own listeners on a response are a few; the stream's floor watch is one more at most
        expect((sse as unknown as { res: { listenerCount: (e: string) => number } }).res.listenerCount('drain')).toBeLessThanOrEqual(2)
      }
    } finally {
      await s.close()
    }
    expect(warnings.filter(w => w.includes('MaxListenersExceeded'))).toEqual([])
  })
})
