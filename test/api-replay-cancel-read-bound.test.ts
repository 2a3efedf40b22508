/**
 * A replay whose API client went away gave its slot back at once, while its
 * log read (up to REPLAY_MAX_BYTES of events) went on: on a slow disk, each
 * canceled replay let another start its read, so the reads in memory at once
 * were no longer bounded by API_REPLAYS_CONCURRENT_MAX (found by session 59's
 * review: 12 canceled replays, 12 reads at once). Now a canceled replay keeps
 * its slot until its bounded local read ends, and gives it back then.
 *
 * The disk here is slow by a gate: every read of the node's log waits on it
 * until the test opens it.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { API_REPLAYS_CONCURRENT_MAX } from '../src/api/constants.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

/** Replays asked for and canceled while the disk is slow: well past the slots. */
const CANCELED_REPLAYS = 3 * API_REPLAYS_CONCURRENT_MAX

describe('a canceled replay holds its slot until its log read ends', () => {
  let nodes: MeshNode[] = []
  let node: MeshNode
  let api: ApiServer
  const token = newToken()
  const gate = Promise.withResolvers<void>()
  let started = 0
  let reading = 0
  let mostReading = 0

  beforeAll(async () => {
    nodes = await startLoneNodes(1)
    node = nodes[0]!
    const read = node.events.readCorrelation.bind(node.events)
    vi.spyOn(node.events, 'readCorrelation').mockImplementation(async (id, maxBytes) => {
      started++
      reading++
      mostReading = Math.max(mostReading, reading)
      try {
        await gate.promise
        return await read(id, maxBytes)
      } finally {
        reading--
      }
    })
    api = await startApiServer(node, { token, port: 0, checkResponses: true })
  })

  afterAll(async () => {
    gate.resolve()
    await api?.close()
    await stopAll(nodes)
  })

  it('reads at most API_REPLAYS_CONCURRENT_MAX logs at once, and the slots come back once the reads end', async () => {
    let refused = 0
    const canceled: Array<Promise<Response>> = []
    for (let i = 0; i < CANCELED_REPLAYS; i++) {
      const ctl = new AbortController()
      const before = started
      let answer: Response | undefined
      let failed: unknown
      const res = fetch(`${api.url}/v1/events/gone-${i}/replay?timeout_ms=0`, { headers: { authorization: `Bearer ${token}` }, signal: ctl.signal })
      void res.then(r => { answer = r }, (err: unknown) => { failed = err })
      await until(() => started > before || answer !== undefined || failed !== undefined, `replay ${i} to start its read or be refused`)
      expect(failed).toBeUndefined()
      if (answer !== undefined) {
        // every slot is held by a canceled replay still reading: refused, no read started
        expect(answer.status).toBe(429)
        expect(await answer.json()).toMatchObject({ error: { code: 'INVALID_REQUEST', details: { reason: 'too_many_replays' } } })
        refused++
        continue
      }
      ctl.abort()
      canceled.push(res)
    }
    // before: 12 reads at once (each canceled replay gave its slot back as its read went on)
    expect(mostReading).toBeLessThanOrEqual(API_REPLAYS_CONCURRENT_MAX)
    expect(refused).toBe(CANCELED_REPLAYS - API_REPLAYS_CONCURRENT_MAX)
    for (const c of canceled) await expect(c).rejects.toThrow()
    expect(api.stats().replays).toBe(API_REPLAYS_CONCURRENT_MAX)

    // the disk answers: the canceled replays end and give their slots back
    gate.resolve()
    await until(() => api.stats().replays === 0, 'the canceled replays to give their slots back once their reads ended')
    expect(reading).toBe(0)
    const fresh = await raw(`${api.url}/v1/events/fresh/replay?timeout_ms=0`, { token })
    expect(fresh.status).toBe(200)
    expect(fresh.body).toMatchObject({ correlation_id: 'fresh' })
  })
})
