/**
 * What a bridged A2A server sends is bounded on the way in: an answer read
 * whole (the agent card, a unary call's answer, an error body) stops at
 * A2A_RESPONSE_MAX_BYTES and fails with "too large", while a stream of more
 * bytes than that goes on; and a task that sends status messages as fast as
 * it can makes at most A2A_PROGRESS_MAX_PER_RUN run.progress events, one per
 * A2A_PROGRESS_MIN_INTERVAL_MS, and its run still ends with the answer.
 * Real nodes, a hand-made hostile server and an @a2a-js/sdk server.
 */
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import type { Server } from 'node:http'
import express from 'express'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AGENT_CARD_PATH, Role, TaskState } from '@a2a-js/sdk'
import { AgentEvent, type AgentExecutor, type ExecutionEventBus, type RequestContext } from '@a2a-js/sdk/server'
import { agentCardHandler } from '@a2a-js/sdk/server/express'
import { A2A_PROGRESS_MIN_INTERVAL_MS, A2A_RESPONSE_MAX_BYTES } from '../src/a2a/constants.ts'
import { A2aOutbound, mergeDrafts } from '../src/a2a/outbound.ts'
import { AapError } from '../src/errors.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { buildAgentCard, startA2aServer, type A2aServerHandle } from '../scripts/lib/ref-a2a.ts'
import { startMesh, stopAll, until } from './helpers.ts'

/** What the hostile server offers to write for one answer: several times the bound. */
const HUGE = 8 * A2A_RESPONSE_MAX_BYTES
const CHUNK = 'a'.repeat(64 * 1024)

interface Pumped { written: number, cutShort: boolean }

/** Write `head`, then filler up to HUGE bytes, then `tail`, at the pace the reader takes it; notes whether the reader hung up first. */
function pump (res: express.Response, status: number, head: string, tail: string): Pumped {
  const p: Pumped = { written: 0, cutShort: false }
  res.writeHead(status, { 'content-type': 'application/json' })
  res.on('close', () => { if (p.written < HUGE) p.cutShort = true })
  res.write(head)
  const go = (): void => {
    while (p.written < HUGE) {
      p.written += CHUNK.length
      if (!res.write(CHUNK)) { res.once('drain', go); return }
    }
    res.end(tail)
  }
  go()
  return p
}

describe('A2A outbound: an answer read whole stops at A2A_RESPONSE_MAX_BYTES', () => {
  let nodes: MeshNode[] = []
  let server: Server
  let url = ''
  let cap: { capability_id: string, version: string }
  const answers: Pumped[] = []
  let errorStatus = 200

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    const app = express()
    server = app.listen(0, '127.0.0.1')
    await once(server, 'listening')
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    const card = buildAgentCard(url) // cannot stream: SendMessage, then GetTask polls
    app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: { getAgentCard: async () => card } }))
    app.get('/huge-card/.well-known/agent-card.json', (_req, res) => { answers.push(pump(res, 200, '{"name":"', '"}')) })
    app.post('/a2a/jsonrpc', (_req, res) => {
      const head = '{"jsonrpc":"2.0","id":1,"result":{"task":{"id":"t1","contextId":"c","status":{"state":"TASK_STATE_WORKING","message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"'
      answers.push(pump(res, errorStatus, head, '"}]}}}}}'))
    })
    const out = new A2aOutbound(nodes[1]!, silentLogger())
    const agent = await out.add(url)
    cap = agent.draft.capabilities![0]!
    await nodes[1]!.publishCard(mergeDrafts(undefined, [agent.draft])!)
  })
  afterAll(async () => {
    server?.closeAllConnections()
    server?.close()
    await stopAll(nodes)
  })

  for (const status of [200, 500]) {
    it(`fails the run (too large) and hangs up long before the end of a huge answer (HTTP ${status})`, async () => {
      const [caller, bridge] = nodes as [MeshNode, MeshNode]
      errorStatus = status
      const before = answers.length
      const run = await caller.delegate({ to_agent: bridge.agentId, task_id: `task-huge-${status}`, capability: cap, input: { text: 'go' } })
      await until(async () => {
        const state = (await bridge.runs.store.get(run.run_id))?.state
        return state === 'failed' || state === 'completed'
      }, 'the run to end', 30_000)
      const ended = await bridge.runs.store.get(run.run_id)
      expect(ended?.state).toBe('failed')
      expect(ended?.failure?.message).toContain(`too large: more than ${A2A_RESPONSE_MAX_BYTES} bytes`)
      const answer = answers[before]
      expect(answer).toBeDefined()
      await until(() => answer!.cutShort, 'the bridge to hang up')
      // the bound, and what the sockets between hold: far from all of it
      expect(answer!.written).toBeLessThan(HUGE / 2)
    })
  }

  it('refuses to join an A2A agent whose card is too large (INVALID_REQUEST)', async () => {
    const before = answers.length
    const err: unknown = await new A2aOutbound(nodes[0]!, silentLogger()).add(`${url}/huge-card`).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(AapError)
    expect((err as AapError).code).toBe('INVALID_REQUEST')
    expect((err as AapError).message).toContain(`too large: more than ${A2A_RESPONSE_MAX_BYTES} bytes`)
    await until(() => answers[before]?.cutShort === true, 'the bridge to hang up')
    expect(answers[before]!.written).toBeLessThan(HUGE / 2)
  })
})

/** Status messages the chatty server sends per task, and the characters of each: more bytes in all than A2A_RESPONSE_MAX_BYTES. */
const UPDATES = 300
const TEXT_CHARS = 20 * 1024

/** WORKING, then UPDATES working status messages as fast as it can, then the result and COMPLETED. */
const chatty: AgentExecutor = {
  execute: async (ctx: RequestContext, bus: ExecutionEventBus): Promise<void> => {
    const { taskId, contextId } = ctx
    const now = (): string => new Date().toISOString()
    bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: now() }, artifacts: [], history: [ctx.userMessage], metadata: undefined }))
    for (let i = 0; i < UPDATES; i++) {
      const message = {
        messageId: `m-${i}`, contextId, taskId, role: Role.ROLE_AGENT, metadata: undefined, extensions: [], referenceTaskIds: [],
        parts: [{ content: { $case: 'text' as const, value: `${i} `.padEnd(TEXT_CHARS, '.') }, metadata: undefined, filename: '', mediaType: 'text/plain' }]
      }
      bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING, message, timestamp: now() }, metadata: undefined }))
    }
    bus.publish(AgentEvent.artifactUpdate({
      taskId, contextId, append: false, lastChunk: true, metadata: undefined,
      artifact: { artifactId: 'result', name: 'result', description: '', parts: [{ content: { $case: 'data', value: { updates: UPDATES } }, metadata: undefined, filename: '', mediaType: 'application/json' }], metadata: undefined, extensions: [] }
    }))
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_COMPLETED, message: undefined, timestamp: now() }, metadata: undefined }))
    bus.finished()
  },
  cancelTask: async (): Promise<void> => {}
}

describe('A2A outbound: a task that floods status messages', () => {
  let nodes: MeshNode[] = []
  let server: A2aServerHandle
  let cap: { capability_id: string, version: string }
  const MAX = 20

  beforeAll(async () => {
    nodes = await startMesh(3, { transport: 'tcp' })
    server = await startA2aServer({ executor: chatty, streaming: true })
    // nodes[1] with the node's own bounds; nodes[2] with a small count and no interval, so the count is what stops it
    for (const [node, opts] of [[nodes[1]!, {}], [nodes[2]!, { progress: { maxPerRun: MAX, minIntervalMs: 0 } }]] as const) {
      const agent = await new A2aOutbound(node, silentLogger(), opts).add(server.url)
      cap = agent.draft.capabilities![0]!
      await node.publishCard(mergeDrafts(undefined, [agent.draft])!)
    }
  })
  afterAll(async () => {
    await server?.close()
    await stopAll(nodes)
  })

  async function forwarded (bridge: MeshNode, taskId: string): Promise<{ progress: number, ms: number }> {
    const started = Date.now()
    const run = await nodes[0]!.delegate({ to_agent: bridge.agentId, task_id: taskId, capability: cap, input: { text: 'go' } })
    await until(async () => {
      const state = (await bridge.runs.store.get(run.run_id))?.state
      return state === 'completed' || state === 'failed'
    }, 'the run to end', 30_000)
    const ms = Date.now() - started
    const ended = await bridge.runs.store.get(run.run_id)
    expect(ended?.state, ended?.failure?.message).toBe('completed')
    expect(ended?.output).toEqual({ artifacts: [{ artifact_id: 'result', name: 'result', parts: [{ data: { updates: UPDATES } }] }] })
    const events = await bridge.runs.store.log.read(run.run_id, 0, 10 * UPDATES)
    expect(events.at(-1)?.type).toBe('run.completed')
    return { progress: events.filter(e => e.type === 'run.progress').length, ms }
  }

  it('reports at most the bound of progress (the task id included), and the run ends with the answer', async () => {
    const { progress } = await forwarded(nodes[2]!, 'task-flood-count')
    expect(progress).toBe(MAX)
  })

  it('coalesces status messages to one per A2A_PROGRESS_MIN_INTERVAL_MS', async () => {
    const { progress, ms } = await forwarded(nodes[1]!, 'task-flood-interval')
    // the task id, the first status message, then at most one per interval while the task went on
    expect(progress).toBeGreaterThanOrEqual(2)
    expect(progress).toBeLessThanOrEqual(2 + Math.ceil(ms / A2A_PROGRESS_MIN_INTERVAL_MS))
    expect(progress).toBeLessThan(UPDATES / 10)
  })
})
