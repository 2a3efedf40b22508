/**
 * An event stream whose subscription ended while the node subscribed (it can
 * fall more than SUBSCRIBER_BUFFER_MAX_EVENTS live events behind during its
 * first syncs) was answered with an empty 200: no SSE, no `error` event, so a
 * client could not tell it from a stream that ended normally. The stream now
 * opens and ends with the documented `error` event. Found by session 46's
 * review. The overflow inside subscribe's window is made here by failing the
 * real subscription the way delivery fails it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { SubscriberOverflowError } from '../src/events/subscription.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'

describe('an event stream whose subscription failed before the stream opened', () => {
  let nodes: MeshNode[]
  let api: ApiServer
  let token: string
  beforeAll(async () => {
    nodes = await startMesh(1)
    token = newToken()
    api = await startApiServer(nodes[0]!, { token, port: 0, checkResponses: true })
  })
  afterAll(async () => { await api.close(); await stopAll(nodes) })

  it('ends with the error event that says why', async () => {
    const events = nodes[0]!.events
    const real = events.subscribe.bind(events)
    events.subscribe = (async (...args: Parameters<typeof real>) => {
      const sub = await real(...args)
      sub.fail(new SubscriberOverflowError(args[0], 4096))
      return sub
    }) as typeof events.subscribe
    try {
      const r = await raw(`${api.url}/v1/events/failed-sub-task/stream`, { token })
      expect(r.status).toBe(200)
      expect(r.headers.get('content-type')).toMatch(/^text\/event-stream/)
      const text = String(r.body)
      expect(text).toMatch(/^event: error$/m)
      const data = JSON.parse(text.split('\n').find(l => l.startsWith('data: '))!.slice('data: '.length))
      expect(data.error).toMatchObject({ code: 'INTERNAL', details: { reason: 'overflow', max_buffered: 4096 } })
    } finally {
      events.subscribe = real
    }
  })
})
