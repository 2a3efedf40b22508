/**
 * A bridged task's status messages are information: one a run.progress event
 * cannot carry (over EVENT_PAYLOAD_MAX_BYTES, nested too deep, or `parts` that
 * are no parts) is reported cut and marked `truncated: true`, counted in the
 * bridge's stats, and the run goes on to its end, whether it is reported at
 * once or later, streamed or polled. Real nodes, a hand-made server on 127.0.0.1.
 */
import { once } from 'node:events'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { fitProgress } from '../src/a2a/outbound-bounds.ts'
import { A2aOutbound, mergeDrafts } from '../src/a2a/outbound.ts'
import { EVENT_PAYLOAD_MAX_BYTES } from '../src/constants.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { a2aCardJson } from './fixtures/a2a-card-json.ts'

function deep (levels: number): unknown {
  let v: unknown = 'bottom'
  for (let i = 0; i < levels; i++) v = { v }
  return v
}

/** The unfit status messages the server sends, in order, while its task works. */
const UNFIT = [
  { messageId: 'big', role: 'ROLE_AGENT', parts: [{ text: 'é'.repeat(40 * 1024) }] },
  { messageId: 'bad-parts', role: 'ROLE_AGENT', parts: [{ data: { type: 'aap.run.progress', payload: { step: 2, parts: 5 } } }] },
  { messageId: 'deep', role: 'ROLE_AGENT', parts: [{ data: { type: 'aap.run.progress', payload: { text: 'deep', nest: deep(200) } } }] }
]

function card (url: string, streaming: boolean): Record<string, unknown> {
  return a2aCardJson({ name: 'unfit-progress', skill: streaming ? 'streamed' : 'polled', url, streaming })
}

const ARTIFACT = { artifactId: 'r', name: 'r', parts: [{ data: { ok: true } }] }

function task (state: string, message?: unknown): Record<string, unknown> {
  return { id: 't1', contextId: 'c', status: { state, timestamp: new Date().toISOString(), ...(message === undefined ? {} : { message }) }, artifacts: state === 'TASK_STATE_COMPLETED' ? [ARTIFACT] : [], history: [] }
}

describe('A2A outbound: status messages a progress event cannot carry', () => {
  let nodes: MeshNode[] = []
  let server: Server
  let url = ''
  /** GetTask polls answered so far, per task: each shows the next unfit message, then the task completes. */
  let polls = 0

  beforeAll(async () => {
    nodes = await startMesh(3, { transport: 'tcp' })
    server = createServer((req: IncomingMessage, res: ServerResponse) => {
      let body = ''
      req.on('data', (c: Buffer) => { body += c.toString() })
      req.on('end', () => {
        const streaming = req.url?.startsWith('/streamed') === true
        if (req.url?.endsWith('agent-card.json') === true) {
          res.writeHead(200, { 'content-type': 'application/json' })
          res.end(JSON.stringify(card(streaming ? `${url}/streamed` : `${url}/polled`, streaming)))
          return
        }
        const rpc = JSON.parse(body) as { id: unknown, method: string }
        const result = (r: unknown): string => JSON.stringify({ jsonrpc: '2.0', id: rpc.id, result: r })
        if (streaming) {
          res.writeHead(200, { 'content-type': 'text/event-stream' })
          res.write(`data: ${result({ task: task('TASK_STATE_WORKING') })}\n\n`)
          for (const message of UNFIT) res.write(`data: ${result({ statusUpdate: { taskId: 't1', contextId: 'c', status: { state: 'TASK_STATE_WORKING', message } } })}\n\n`)
          res.end(`data: ${result({ task: task('TASK_STATE_COMPLETED') })}\n\n`)
          return
        }
        res.writeHead(200, { 'content-type': 'application/json' })
        if (rpc.method === 'SendMessage') {
          polls = 0
          res.end(result({ task: task('TASK_STATE_WORKING', UNFIT[0]) }))
          return
        }
        polls++
        res.end(result(polls < UNFIT.length ? task('TASK_STATE_WORKING', UNFIT[polls]) : task('TASK_STATE_COMPLETED')))
      })
    })
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(async () => {
    server?.closeAllConnections()
    server?.close()
    await stopAll(nodes)
  })

  for (const [i, path] of [[1, 'streamed'], [2, 'polled']] as const) {
    it(`completes a ${path} task whose status messages are unfit, reporting them cut`, async () => {
      const bridge = nodes[i]!
      // no interval: every status message is reported at once, the path on which a refused report failed the run
      const out = new A2aOutbound(bridge, silentLogger(), { progress: { minIntervalMs: 0 } })
      const agent = await out.add(`${url}/${path}`)
      await bridge.publishCard(mergeDrafts(undefined, [agent.draft])!)
      const run = await nodes[0]!.delegate({ to_agent: bridge.agentId, task_id: `unfit-${path}`, capability: agent.draft.capabilities![0]!, input: { text: 'go' } })
      await until(async () => {
        const state = (await bridge.runs.store.get(run.run_id))?.state
        return state === 'completed' || state === 'failed'
      }, 'the run to end', 30_000)
      const ended = await bridge.runs.store.get(run.run_id)
      expect(ended?.state, ended?.failure?.message).toBe('completed')
      expect(ended?.output).toEqual({ artifacts: [{ artifact_id: 'r', name: 'r', parts: [{ data: { ok: true } }] }] })

      const events = await bridge.runs.store.log.read(run.run_id, 0, 100)
      const progress = events.filter(e => e.type === 'run.progress').map(e => e.payload)
      expect(progress[0]).toEqual({ a2a_task_id: 't1' })
      const [big, badParts, tooDeep] = progress.slice(1)
      expect(big?.truncated).toBe(true)
      expect(typeof big?.text).toBe('string')
      expect((big?.text as string).length).toBeGreaterThan(1000)
      expect(Buffer.byteLength(JSON.stringify(big))).toBeLessThanOrEqual(EVENT_PAYLOAD_MAX_BYTES)
      expect(badParts).toEqual({ step: 2, truncated: true })
      expect(tooDeep).toEqual({ text: 'deep', truncated: true })
      expect(out.stats).toEqual({ progressCut: 3, progressRefused: 0 })
    })
  }

  it('fitProgress leaves a fit payload alone and cuts text of any width to the bound', () => {
    const fit = { text: 'fine', parts: [] }
    expect(fitProgress(fit)).toEqual({ payload: fit, cut: false })
    for (const ch of ['a', 'é', '\u0001', '😀']) {
      const { payload, cut } = fitProgress({ text: ch.repeat(30_000), other: 'x'.repeat(50_000) }, 4096)
      expect(cut).toBe(true)
      expect(payload.truncated).toBe(true)
      expect(payload.other).toBeUndefined()
      expect(Buffer.byteLength(JSON.stringify(payload))).toBeLessThanOrEqual(4096)
      // at most 6 bytes of JSON per unit (a control character): well over a tenth of the bound is kept
      expect((payload.text as string).length).toBeGreaterThan(4096 / 10)
      expect((payload.text as string).isWellFormed()).toBe(true)
    }
    expect(fitProgress({ blob: 'x'.repeat(50_000) }, 4096)).toEqual({ payload: { truncated: true }, cut: true })
    expect(fitProgress({ text: 'short', blob: 'x'.repeat(50_000) }, 4096)).toEqual({ payload: { text: 'short', truncated: true }, cut: true })
  })
})
