/**
 * An event stream whose correlation holds more history than a client may
 * leave unread (API_SSE_MAX_BUFFERED_BYTES, lowered here): the history is
 * the backlog a client is sent on connecting, which it has had no chance to
 * read, so it does not count against the cut-off (as the work stream's
 * backlog does not). Before, the history went out under the cut-off and
 * such a stream was destroyed before `ready`, on every reconnect.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
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
  const streams: Stream[] = []

  beforeAll(async () => {
    nodes = await startMesh(2)
    const [a, b] = nodes as [MeshNode, MeshNode]
    b.runs.handle(CAP, async (ctx) => {
      for (let i = 0; i < STEPS; i++) await ctx.progress({ step: i, chunk: CHUNK })
      return { done: true }
    })
    await b.publishCard({ name: 'talkative', capabilities: [CAP] })
    const token = newToken()
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
    const s = new Stream(client, `/v1/events/${encodeURIComponent(run.correlation_id)}/stream`)
    streams.push(s)
    await s.ready()
    const types = s.events.filter(e => e.event !== 'ready').map(e => e.event)
    expect(types[0]).toBe('run.started')
    expect(types.filter(t => t === 'run.progress')).toHaveLength(STEPS)
    expect(types.at(-1)).toBe('run.completed')
  })
})
