/**
 * Issue #16, turns (protocols/turns.md): three turns of one conversation with
 * the same agent, through the in-process API and through the HTTP API (the
 * delegator's side, and a sidecar agent that reads its conversation from the
 * work item and saves its context over HTTP). Each turn's handler sees the
 * earlier turns and the saved context, also after the executor restarts from
 * its data directory; the replay lists the turns in order; earlier turns are
 * read-only and a conversation is its delegator's only.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient } from '../src/api/client.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import type { RunHandler } from '../src/runs/runtime.ts'
import { data, Stream } from './api-helpers.ts'
import { until } from './helpers.ts'

const CHAT = { capability_id: 'cap:chat', version: '1.0.0' }
const WAIT = { capability_id: 'cap:chat-wait', version: '1.0.0' }
const SIDE = { capability_id: 'cap:chat-sidecar', version: '1.0.0' }

/** Replies with what it was shown, and counts the turns in its saved context. */
const chat: RunHandler = async (ctx) => {
  const c = ctx.conversation
  const saved = c.saved as { count?: number, said?: string[] } | null
  await ctx.saveContext({ count: (saved?.count ?? 0) + 1, said: [...(saved?.said ?? []), String(ctx.input.say)] })
  return { turn: c.turn, seen_inputs: c.turns.map(t => t.input.say), seen_outputs: c.turns.map(t => t.output?.turn ?? null), saved }
}

describe('turns: a conversation with an agent keeps its memory', () => {
  let dataDir = ''
  let A: MeshNode, B: MeshNode, C: MeshNode
  let apiA: ApiServer, apiC: ApiServer
  let client: ApiClient, agentC: ApiClient
  const opts = { listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true }

  const startB = async (): Promise<MeshNode> => {
    const n = await createMeshNode({ ...opts, dataDir })
    await n.start()
    n.runs.handle(CHAT, chat)
    n.runs.handle(WAIT, async (ctx) => { await ctx.block('waiting', 'cp-turn'); return {} })
    await n.publishCard({ name: 'chat', capabilities: [CHAT, WAIT] })
    return n
  }
  const ended = async (node: MeshNode, runId: string): Promise<Run> => {
    let run: Run | undefined
    await until(async () => {
      run = await node.runs.getRun(runId)
      return run.state === 'completed' || run.state === 'failed'
    }, `run ${runId} to end`)
    return run!
  }

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'aap-turns-'))
    A = await createMeshNode(opts)
    C = await createMeshNode(opts)
    await A.start()
    await C.start()
    B = await startB()
    for (const n of [A, C]) await n.join(B.addresses)
    const token = newToken()
    apiA = await startApiServer(A, { token, port: 0, checkResponses: true })
    client = new ApiClient(apiA.url, token)
  })
  afterAll(async () => {
    await apiA?.close()
    await apiC?.close()
    for (const n of [A, B, C]) await n?.stop()
    await rm(dataDir, { recursive: true, force: true })
  })

  it('in process: three turns, the third after the executor restarted; each sees the earlier turns and the saved context; the replay lists them in order', async () => {
    const task = 'task-turns-inproc'
    const r1 = await A.delegate({ to_agent: B.agentId, task_id: task, capability: CHAT, input: { say: 'one' } })
    const e1 = await ended(A, r1.run_id)
    expect(e1.output).toEqual({ turn: 1, seen_inputs: [], seen_outputs: [], saved: null })

    const r2 = await A.delegate({ to_agent: B.agentId, task_id: task, capability: CHAT, input: { say: 'two' }, continue_run: r1.run_id })
    expect(r2).toMatchObject({ context_id: r1.run_id, turn: 2, previous_turn: r1.run_id })
    const e2 = await ended(A, r2.run_id)
    expect(e2.output).toEqual({ turn: 2, seen_inputs: ['one'], seen_outputs: [1], saved: { count: 1, said: ['one'] } })

    // the executor restarts from its data directory: the conversation is durable
    await B.stop()
    B = await startB()
    for (const n of [A, C]) await n.join(B.addresses)

    const r3 = await A.delegate({ to_agent: B.agentId, task_id: task, capability: CHAT, input: { say: 'three' }, continue_run: r2.run_id })
    const e3 = await ended(A, r3.run_id)
    expect(e3.output).toEqual({ turn: 3, seen_inputs: ['one', 'two'], seen_outputs: [1, 2], saved: { count: 2, said: ['one', 'two'] } })

    const replay = await A.events.replay(task, { participants: [B.agentId] })
    expect(replay.contexts).toEqual([{ context_id: r1.run_id, executor: B.agentId, delegator: A.agentId, turns: [r1.run_id, r2.run_id, r3.run_id] }])
    expect(replay.runs.map(r => [r.turn, r.previous_turn])).toEqual([[1, null], [2, r1.run_id], [3, r2.run_id]])
    const started = replay.runs[2]?.events[0]
    expect(started?.payload.turn).toEqual({ context_id: r1.run_id, turn: 3, previous_turn: r2.run_id })
  })

  it('earlier turns are read-only, one turn runs at a time, and a conversation is its delegator\'s only', async () => {
    const task = 'task-turns-rules'
    const r1 = await A.delegate({ to_agent: B.agentId, task_id: task, capability: CHAT, input: { say: 'a' }, context_id: 'ctx-rules' })
    expect(r1).toMatchObject({ context_id: 'ctx-rules', turn: 1, previous_turn: null })
    await ended(A, r1.run_id)
    const r2 = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WAIT, input: {}, context_id: 'ctx-rules' })
    expect(r2).toMatchObject({ context_id: 'ctx-rules', turn: 2 })
    await until(async () => (await A.runs.getRun(r2.run_id)).state === 'blocked', 'turn 2 blocked')
    await expect(A.delegate({ to_agent: B.agentId, task_id: task, capability: CHAT, input: {}, context_id: 'ctx-rules' }))
      .rejects.toMatchObject({ code: 'INVALID_TRANSITION', details: { reason: 'turn_in_progress' } })
    await A.runs.cancel(r2.run_id, 'next turn')
    await expect(A.delegate({ to_agent: B.agentId, task_id: task, capability: CHAT, input: {}, continue_run: r1.run_id }))
      .rejects.toMatchObject({ code: 'INVALID_TRANSITION', details: { reason: 'not_latest_turn' } })
    await expect(C.delegate({ to_agent: B.agentId, task_id: task, capability: CHAT, input: {}, continue_run: r2.run_id }))
      .rejects.toMatchObject({ code: 'UNAUTHORIZED', details: { reason: 'not_context_owner' } })
    await expect(A.delegate({ to_agent: B.agentId, task_id: 'another-task', capability: CHAT, input: {}, continue_run: r2.run_id }))
      .rejects.toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'turn_correlation' } })
    // C's conversation of the same name is its own: a first turn
    const own = await C.delegate({ to_agent: B.agentId, task_id: task, capability: CHAT, input: { say: 'c' }, context_id: 'ctx-rules' })
    expect(own).toMatchObject({ turn: 1 })
    const r3 = await A.delegate({ to_agent: B.agentId, task_id: task, capability: CHAT, input: { say: 'b' }, continue_run: r2.run_id })
    expect((await ended(A, r3.run_id)).output).toMatchObject({ turn: 3, seen_inputs: ['a', null], saved: { count: 1, said: ['a'] } })
  })

  it('through the HTTP API: the delegator continues with continue_run, and a sidecar agent reads its conversation from the work item and saves its context', async () => {
    // C's agent is a sidecar: it serves its capability through C's API
    const tokenC = newToken()
    apiC = await startApiServer(C, { token: tokenC, port: 0, checkResponses: true })
    agentC = new ApiClient(apiC.url, tokenC)
    await agentC.call('PUT', '/v1/card', { card: { name: 'chat-sidecar', capabilities: [SIDE] } })
    const work = new Stream(agentC, '/v1/work/stream')
    await work.ready()
    try {
      const task = 'task-turns-api'
      let previous: string | undefined
      for (const say of ['x', 'y', 'z']) {
        const { run } = await client.call<{ run: Run }>('POST', '/v1/delegate', {
          to_agent: C.agentId, task_id: task, capability: SIDE, input: { say }, ...(previous === undefined ? {} : { continue_run: previous })
        })
        const item = data(await work.next(e => e.event === 'work' && data(e).run.run_id === run.run_id, 'the work item'))
        const c = item.conversation
        expect(c.turns.map((t: { input: { say: string } }) => t.input.say)).toEqual(previous === undefined ? [] : say === 'y' ? ['x'] : ['x', 'y'])
        const saved = await agentC.call<{ saved: { said: string[] } }>('PUT', `/v1/runs/${encodeURIComponent(run.run_id)}/context`, { context: { said: [...(c.saved?.said ?? []), say] } })
        expect(saved.saved.said.at(-1)).toBe(say)
        await agentC.call('POST', `/v1/runs/${encodeURIComponent(run.run_id)}/complete`, { output: { heard: c.saved?.said ?? [] } })
        await until(async () => (await client.call<{ run: Run }>('GET', `/v1/runs/${encodeURIComponent(run.run_id)}`)).run.state === 'completed', 'the turn to complete')
        const done = (await client.call<{ run: Run }>('GET', `/v1/runs/${encodeURIComponent(run.run_id)}`)).run
        expect(done.output).toEqual({ heard: previous === undefined ? [] : say === 'y' ? ['x'] : ['x', 'y'] })
        previous = run.run_id
      }
      const replay = await client.call<{ contexts: Array<{ turns: string[] }> }>('GET', `/v1/events/${task}/replay`, undefined, { participant: C.agentId })
      expect(replay.contexts[0]?.turns.length).toBe(3)
    } finally {
      await work.close()
    }
  })
})
