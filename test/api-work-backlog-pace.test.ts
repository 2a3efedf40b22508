/**
 * A work stream's backlog goes out at the pace its client reads, as an event
 * stream's history does. Found by session 49's review: every open run's items
 * were written at once on connecting, exempt from the cut-off, and a work
 * item carries its run's conversation (up to CONTEXT_MAX_TURNS - 1 earlier
 * turns, each with an input of up to RUN_INPUT_MAX_BYTES and an output of up
 * to EVENT_PAYLOAD_MAX_BYTES, and a saved context of up to
 * CONTEXT_STATE_MAX_BYTES): about 3 MB a run, so with
 * MAX_CONCURRENT_INBOUND_RUNS open runs some 800 MB per client that connects.
 * Live items that come while the backlog goes out wait behind it, so the ids
 * a client sees only grow.
 */
import { request, type IncomingMessage } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient } from '../src/api/client.ts'
import { API_SSE_HISTORY_HIGH_WATER_BYTES } from '../src/api/constants.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:api-backlog-pace', version: '1.0.0' }
const EARLIER = { capability_id: 'cap:api-backlog-pace-earlier', version: '1.0.0' }
/** Conversations, each with an open turn handed to the sidecar. */
const CONTEXTS = 8
/** Earlier turns of each: about 43 KiB each (input and output), so each open turn's work item is about 1.3 MiB. */
const TURNS = 30
const INPUT = 'i'.repeat(15 * 1024)
const OUTPUT = 'o'.repeat(28 * 1024)

describe('a work stream\'s backlog', () => {
  let nodes: MeshNode[] = []
  let a: MeshNode, b: MeshNode
  let api: ApiServer
  let token: string

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[a, b] = nodes as [MeshNode, MeshNode]
    // the earlier turns are done in process; the card's capability the node serves itself is not the sidecar's
    a.runs.handle(EARLIER, async () => ({ out: OUTPUT }))
    token = newToken()
    api = await startApiServer(a, { token, port: 0 })
    await new ApiClient(api.url, token).call('PUT', '/v1/card', { card: { name: 'sidecar', capabilities: [CAP, EARLIER] } })
  })

  afterAll(async () => {
    await api.close()
    await stopAll(nodes)
  })

  async function conversation (c: number): Promise<void> {
    const task = `backlog-pace-${c}`
    let previous: Run | undefined
    for (let t = 0; t < TURNS; t++) {
      const run: Run = await b.delegate({ to_agent: a.agentId, task_id: task, capability: EARLIER, input: { text: INPUT }, ...(previous === undefined ? {} : { continue_run: previous.run_id }) })
      await until(async () => (await a.runs.getRun(run.run_id)).state === 'completed', `turn ${t} of ${task}`)
      previous = run
    }
    await b.delegate({ to_agent: a.agentId, task_id: task, capability: CAP, input: {}, continue_run: previous?.run_id ?? '' })
  }

  it('is sent no faster than its client reads, then ready, then the live items that waited', async () => {
    await Promise.all(Array.from({ length: CONTEXTS }, async (_, c) => { await conversation(c) }))
    await until(() => api.stats().openRuns === CONTEXTS, 'every open turn handed to the sidecar')
    // a client that takes the response and does not read it
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = request(`${api.url}/v1/work/stream`, { headers: { authorization: `Bearer ${token}` } })
      req.on('response', (r) => { r.pause(); resolve(r) })
      req.on('error', reject)
      req.end()
    })
    expect(res.statusCode).toBe(200)
    // the stream waits for its client once what the sockets take is full; written at once, it holds all of it unread
    const unreadBound = API_SSE_HISTORY_HIGH_WATER_BYTES + 2 * 1024 * 1024
    await until(() => api.stats().workBacklogWaits > 0 || api.stats().sseBufferedBytes > unreadBound, 'the backlog to wait for its client')
    // at most the high-water mark and the one item that crossed it are unread (the backlog is about 10 MiB)
    expect(api.stats().sseBufferedBytes).toBeLessThanOrEqual(unreadBound)
    // a run delegated meanwhile: its item waits behind the backlog
    const late = await b.delegate({ to_agent: a.agentId, task_id: 'backlog-pace-late', capability: CAP, input: {} })
    await until(() => api.stats().openRuns === CONTEXTS + 1, 'the late run handed to the sidecar')
    let text = ''
    res.setEncoding('utf8')
    const seen = new Promise<void>((resolve, reject) => {
      res.on('data', (chunk: string) => {
        text += chunk
        if (text.includes(late.run_id)) resolve()
      })
      res.on('end', () => { reject(new Error('stream ended before the late run\'s item')) })
    })
    res.resume()
    await seen
    res.destroy()
    const names = [...text.matchAll(/^event: (.+)$/gm)].map(m => m[1])
    expect(names.slice(0, CONTEXTS + 2)).toEqual([...Array<string>(CONTEXTS).fill('work'), 'ready', 'work'])
    const ids = [...text.matchAll(/^id: (\d+)$/gm)].map(m => Number(m[1]))
    expect(ids).toHaveLength(CONTEXTS + 1)
    expect(ids).toEqual([...ids].sort((x, y) => x - y))
    await until(() => api.stats().workClients === 0, 'the server to let the client go')
  }, 120_000)
})
