/**
 * A turn's handler is shown the newest earlier turns that fit in
 * CONTEXT_CONVERSATION_MAX_BYTES of JSON (protocols/turns.md), not every
 * earlier turn: a conversation of many turns with large inputs held all of
 * them, parsed, for as long as its next turn ran. The turns left out are the
 * oldest, and the shown turns' numbers say how many.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { CONTEXT_CONVERSATION_MAX_BYTES } from '../src/runs/constants.ts'
import { RUN_INPUT_MAX_BYTES } from '../src/constants.ts'
import type { Conversation } from '../src/runs/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CHAT = { capability_id: 'cap:turns-budget', version: '1.0.0' }
/** Each turn's input: a text of this many characters, so 4 turns fit in the budget and 5 do not. */
const PAD = 15_000

describe('turns: the earlier turns a handler sees are bounded in bytes', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  const seen = new Map<string, Conversation>()

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CHAT, async (ctx) => {
      seen.set(ctx.run.run_id, ctx.conversation)
      return { n: ctx.input.n }
    })
    await B.publishCard({ name: 'budget', capabilities: [CHAT] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('shows the newest earlier turns that fit, oldest first, and leaves the older ones out', async () => {
    expect(PAD).toBeLessThan(RUN_INPUT_MAX_BYTES)
    expect(4 * (PAD + 1_000)).toBeLessThan(CONTEXT_CONVERSATION_MAX_BYTES)
    expect(5 * PAD).toBeGreaterThan(CONTEXT_CONVERSATION_MAX_BYTES)
    const task = 'task-turns-budget'
    const contextId = 'ctx-turns-budget'
    const ids: string[] = []
    for (let n = 1; n <= 7; n++) {
      const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: CHAT, context_id: contextId, input: { n, text: 'x'.repeat(PAD) } })
      ids.push(run.run_id)
      await until(async () => (await B.runs.getRun(run.run_id)).state === 'completed', `turn ${n} to complete`)
    }
    const last = seen.get(ids[6] ?? '')
    expect(last?.turn).toBe(7)
    // six earlier turns, of which the newest four fit: turns 1 and 2 are left out
    expect(last?.turns.map(t => t.turn)).toEqual([3, 4, 5, 6])
    expect(last?.turns.map(t => t.run_id)).toEqual(ids.slice(2, 6))
    expect(last?.turns.map(t => t.input.n)).toEqual([3, 4, 5, 6])
    const leftOut = (last?.turns[0]?.turn ?? 0) - 1
    expect(leftOut).toBe(2)
    expect(last?.previous_turn).toBe(ids[5])
    // a turn whose earlier turns all fit sees all of them
    expect(seen.get(ids[3] ?? '')?.turns.map(t => t.turn)).toEqual([1, 2, 3])
  })
})
