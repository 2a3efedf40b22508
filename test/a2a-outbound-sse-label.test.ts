/**
 * An answer the bridge did not ask to stream is read through the bound
 * (A2A_RESPONSE_MAX_BYTES, made small here) whatever type it claims: the SDK
 * reads the card and every unary answer whole, so a server that labels a huge
 * card or SendMessage answer text/event-stream is hung up on near the bound,
 * not read to its end. A real stream (a streaming call's answer) still goes
 * on past the bound. Real nodes and a hand-made hostile server on 127.0.0.1.
 */
import { once } from 'node:events'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { A2aOutbound, mergeDrafts } from '../src/a2a/outbound.ts'
import { AapError } from '../src/errors.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { a2aCardJson } from './fixtures/a2a-card-json.ts'

/** The bound the bridges here read answers with, and what the hostile server offers to write: far more. */
const MAX_BYTES = 64 * 1024
const HUGE = 16 * 1024 * 1024
const CHUNK = Buffer.alloc(64 * 1024, 'a')

interface Pumped { written: number, closed: boolean }

/** Write `head`, then filler up to HUGE bytes, then `tail`, labelled text/event-stream, at the pace the reader takes it. */
function pump (res: ServerResponse, head: string, tail: string): Pumped {
  const p: Pumped = { written: 0, closed: false }
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  res.on('close', () => { p.closed = true })
  res.write(head)
  const go = (): void => {
    while (p.written < HUGE && !p.closed) {
      p.written += CHUNK.length
      if (!res.write(CHUNK)) { res.once('drain', go); return }
    }
    res.end(tail)
  }
  go()
  return p
}

function card (url: string, streaming: boolean): Record<string, unknown> {
  return a2aCardJson({ name: 'sse-liar', description: 'labels every answer an event stream', skill: streaming ? 'streams' : 'answers', url, streaming })
}

describe('A2A outbound: an answer labelled text/event-stream that was not asked for', () => {
  let nodes: MeshNode[] = []
  let server: Server
  let url = ''
  const answers: Pumped[] = []

  beforeAll(async () => {
    nodes = await startMesh(3, { transport: 'tcp' })
    server = createServer((req: IncomingMessage, res: ServerResponse) => {
      let body = ''
      req.on('data', (c: Buffer) => { body += c.toString() })
      req.on('end', () => {
        const path = req.url ?? ''
        if (path === '/huge/.well-known/agent-card.json') {
          answers.push(pump(res, '{"name":"', '"}'))
          return
        }
        const streaming = path.startsWith('/streams')
        const prefix = streaming ? `${url}/streams` : url
        if (path.endsWith('agent-card.json')) {
          res.writeHead(200, { 'content-type': 'application/json' })
          res.end(JSON.stringify(card(prefix, streaming)))
          return
        }
        const rpc = JSON.parse(body) as { id: unknown }
        if (!streaming) {
          answers.push(pump(res, `{"jsonrpc":"2.0","id":${JSON.stringify(rpc.id)},"result":{"task":{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_WORKING","message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"`, '"}]}}}}}'))
          return
        }
        // a real stream of more bytes than the bound: keep-alive comments, then the task, done
        const event = (result: unknown): string => `data: ${JSON.stringify({ jsonrpc: '2.0', id: rpc.id, result })}\n\n`
        const done = { statusUpdate: { taskId: 't1', contextId: 'c', status: { state: 'TASK_STATE_COMPLETED', timestamp: new Date().toISOString() } } }
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write(event({ task: { id: 't1', contextId: 'c', status: { state: 'TASK_STATE_WORKING' }, artifacts: [], history: [] } }))
        for (let i = 0; i < 4 * MAX_BYTES / 1024; i++) res.write(`: ${'k'.repeat(1000)}\n\n`)
        res.end(event({ artifactUpdate: { taskId: 't1', contextId: 'c', append: false, lastChunk: true, artifact: { artifactId: 'r', name: 'r', parts: [{ data: { streamed: true } }] } } }) + event(done))
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

  it('refuses a card labelled an event stream once it passes the bound, and hangs up', async () => {
    const before = answers.length
    const err: unknown = await new A2aOutbound(nodes[0]!, silentLogger(), { responseMaxBytes: MAX_BYTES }).add(`${url}/huge`).catch((e: unknown) => e)
    await until(() => answers[before]?.closed === true, 'the bridge to hang up')
    expect(answers[before]!.written).toBeLessThan(HUGE / 2)
    expect(err).toBeInstanceOf(AapError)
    expect((err as AapError).code).toBe('INVALID_REQUEST')
    expect((err as AapError).message).toContain(`too large: more than ${MAX_BYTES} bytes`)
  })

  it('fails the run (too large) on a SendMessage answer labelled an event stream, and hangs up', async () => {
    const [caller, bridge] = nodes as [MeshNode, MeshNode]
    const agent = await new A2aOutbound(bridge, silentLogger(), { responseMaxBytes: MAX_BYTES }).add(url)
    await bridge.publishCard(mergeDrafts(undefined, [agent.draft])!)
    const before = answers.length
    const run = await caller.delegate({ to_agent: bridge.agentId, task_id: 'sse-liar', capability: agent.draft.capabilities![0]!, input: { text: 'go' } })
    await until(async () => {
      const state = (await bridge.runs.store.get(run.run_id))?.state
      return state === 'failed' || state === 'completed'
    }, 'the run to end', 30_000)
    const ended = await bridge.runs.store.get(run.run_id)
    expect(ended?.state).toBe('failed')
    expect(ended?.failure?.message).toContain(`too large: more than ${MAX_BYTES} bytes`)
    await until(() => answers[before]?.closed === true, 'the bridge to hang up')
    expect(answers[before]!.written).toBeLessThan(HUGE / 2)
  })

  it('still reads a stream it asked for past the bound', async () => {
    const [caller, , bridge] = nodes as [MeshNode, MeshNode, MeshNode]
    const agent = await new A2aOutbound(bridge, silentLogger(), { responseMaxBytes: MAX_BYTES }).add(`${url}/streams`)
    await bridge.publishCard(mergeDrafts(undefined, [agent.draft])!)
    const run = await caller.delegate({ to_agent: bridge.agentId, task_id: 'real-stream', capability: agent.draft.capabilities![0]!, input: { text: 'go' } })
    await until(async () => {
      const state = (await bridge.runs.store.get(run.run_id))?.state
      return state === 'failed' || state === 'completed'
    }, 'the run to end', 30_000)
    const ended = await bridge.runs.store.get(run.run_id)
    expect(ended?.state, ended?.failure?.message).toBe('completed')
    expect(ended?.output).toEqual({ artifacts: [{ artifact_id: 'r', name: 'r', parts: [{ data: { streamed: true } }] }] })
  })
})
