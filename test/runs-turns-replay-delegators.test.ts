/**
 * The replay's conversations are keyed as the executor keeps them: by
 * executor, delegator and context id (src/runs/contexts.ts). Two delegators
 * that each talk to one agent under the same context id have two
 * conversations there, and each turn sees only its own; the replay of their
 * task lists two, each with its delegator. Before, the replay grouped by
 * executor and context id only and showed one conversation of four turns from
 * two delegators. Found by session 55's review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const TALK = { capability_id: 'cap:replay-turns-talk', version: '1.0.0' }
const LEAD = { capability_id: 'cap:replay-turns-lead', version: '1.0.0' }
const TASK = 'task-replay-turns-delegators'

describe('conversations of two delegators under one context id, in the replay', () => {
  let nodes: MeshNode[] = []
  let O: MeshNode, X1: MeshNode, X2: MeshNode, B: MeshNode
  /** Per lead (X1, X2), its two turns with B. */
  const turns = new Map<string, Run[]>()

  beforeAll(async () => {
    nodes = await startMesh(4)
    ;[O, X1, X2, B] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    // B answers with how many earlier turns it was shown
    B.runs.handle(TALK, async (ctx) => ({ earlier: ctx.conversation.turns.length }))
    await B.publishCard({ name: 'talker', capabilities: [TALK] })
    for (const x of [X1, X2]) {
      x.runs.handle(LEAD, async (ctx) => {
        const ended = async (runId: string): Promise<Run> => {
          let r: Run | undefined
          await until(async () => { r = await x.runs.getRun(runId); return r.state === 'completed' }, `turn ${runId}`)
          return r as Run
        }
        const base = { to_agent: B.agentId, task_id: ctx.run.correlation_id, capability: TALK, input: {}, parent_run: ctx.run.run_id }
        const first = await ended((await x.delegate({ ...base, context_id: 'chat' })).run_id)
        const second = await ended((await x.delegate({ ...base, context_id: 'chat' })).run_id)
        turns.set(x.agentId, [first, second])
        return { earlier: [first.output?.earlier, second.output?.earlier] }
      })
      await x.publishCard({ name: 'lead', capabilities: [LEAD] })
    }
  }, 60_000)
  afterAll(async () => { await stopAll(nodes) })

  it('lists one conversation per delegator, each of its own two turns', async () => {
    for (const x of [X1, X2]) {
      const run = await O.delegate({ to_agent: x.agentId, task_id: TASK, capability: LEAD, input: {} })
      await until(async () => (await O.runs.getRun(run.run_id)).state === 'completed', 'the lead to finish')
      // the executor kept them apart: each second turn saw one earlier turn, its own
      expect((await O.runs.getRun(run.run_id)).output).toEqual({ earlier: [0, 1] })
    }
    const replay = await O.events.replay(TASK, { participants: [X1.agentId, X2.agentId, B.agentId] })
    const want = [X1, X2].map(x => ({ context_id: 'chat', executor: B.agentId, delegator: x.agentId, turns: (turns.get(x.agentId) ?? []).map(r => r.run_id) }))
      .sort((a, b) => a.delegator < b.delegator ? -1 : 1)
    expect(replay.contexts).toEqual(want)
  }, 60_000)
})
