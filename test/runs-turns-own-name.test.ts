/**
 * A run's own conversation is "named by its run id" (protocols/turns.md): a
 * delegation with `context_id` = that run id continues that conversation
 * (after its latest turn), and is refused while that turn still runs
 * (turn_in_progress). Before the fix, when the first run had never saved a
 * context, the executor had no context record for it, so the delegation
 * started another conversation of that name at turn 1, beside the live turn.
 * Found by session 45's review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { holdingWorkers, startLoneNodes, stopAll, until } from './helpers.ts'

const HOLD = { capability_id: 'cap:turn-own-name', version: '1.0.0' }

describe('context_id naming a run\'s own conversation', () => {
  let A: MeshNode, B: MeshNode
  const held = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    ;[A, B] = await startLoneNodes(2) as [MeshNode, MeshNode]
    await holdingWorkers([B], HOLD, held)
    await A.join(B.addresses)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll([A, B])
  })

  it('a second turn named by the first run\'s id is refused while the first turn runs (turn_in_progress)', async () => {
    const task = 'task-own-name-1'
    const r1 = await A.delegate({ to_agent: B.agentId, task_id: task, capability: HOLD, input: {} })
    await until(() => held.has(r1.run_id), 'r1 to start')
    // the conversation of r1 is named r1.run_id; its latest turn (r1) has not ended
    await expect(A.delegate({ to_agent: B.agentId, task_id: task, capability: HOLD, input: {}, context_id: r1.run_id }))
      .rejects.toMatchObject({ code: 'INVALID_TRANSITION', details: { reason: 'turn_in_progress' } })
  })

  it('once the first turn ended, a delegation with context_id = its run id is turn 2 after it', async () => {
    const task = 'task-own-name-2'
    const r1 = await A.delegate({ to_agent: B.agentId, task_id: task, capability: HOLD, input: {} })
    await until(() => held.has(r1.run_id), 'r1 to start')
    held.get(r1.run_id)!.resolve()
    await until(async () => (await A.runs.getRun(r1.run_id)).state === 'completed', 'r1 to complete')
    const r2 = await A.delegate({ to_agent: B.agentId, task_id: task, capability: HOLD, input: {}, context_id: r1.run_id })
    expect(r2).toMatchObject({ context_id: r1.run_id, turn: 2, previous_turn: r1.run_id })
    // and continue_run on the first turn is now not the latest turn
    await expect(A.delegate({ to_agent: B.agentId, task_id: task, capability: HOLD, input: {}, continue_run: r1.run_id }))
      .rejects.toMatchObject({ code: 'INVALID_TRANSITION', details: { reason: 'not_latest_turn' } })
  })
})
