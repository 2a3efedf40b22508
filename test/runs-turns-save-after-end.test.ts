/**
 * A turn that ended cannot change its conversation's saved context
 * (protocols/turns.md): not even when its handler is still running after the
 * delegator canceled the turn. Before, `saveContext` checked the
 * run's state outside the run's lock, so a cancel committed between that
 * check and the write (a slow read of the context record) let a canceled
 * turn's save be written, and the next turn read it. Found by session 55's
 * review. The save now runs under the run's lock on the run's state then,
 * serialised with the cancel's commit; this test holds the rule for a save
 * made after the cancel (that interleaving is not forced here: the handler's
 * run object already followed the cancel before the fix).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

const TALK = { capability_id: 'cap:turn-save-after-end', version: '1.0.0' }

describe('saving the context of a turn that ended', () => {
  let A: MeshNode, B: MeshNode
  /** Per run, the gate its handler waits on before it saves, and what its save came to. */
  const gates = new Map<string, PromiseWithResolvers<void>>()
  const saves = new Map<string, Promise<string>>()
  const seen = new Map<string, unknown>()

  beforeAll(async () => {
    ;[A, B] = await startLoneNodes(2) as [MeshNode, MeshNode]
    B.runs.handle(TALK, async (ctx) => {
      seen.set(ctx.run.run_id, ctx.conversation.saved)
      if (ctx.input.save !== true) return {}
      const gate = Promise.withResolvers<void>()
      gates.set(ctx.run.run_id, gate)
      // the handler goes on after its turn was canceled: it does not watch its signal
      await gate.promise
      const saved = ctx.saveContext({ from: 'a canceled turn' }).then(() => 'saved', (err: unknown) => `refused: ${(err as { code?: string }).code ?? ''} ${JSON.stringify((err as { details?: unknown }).details)}`)
      saves.set(ctx.run.run_id, saved)
      await saved
      return {}
    })
    await B.publishCard({ name: 'talker', capabilities: [TALK] })
    await A.join(B.addresses)
  })
  afterAll(async () => {
    for (const g of gates.values()) g.resolve()
    await stopAll([A, B])
  })

  it('a save after the turn was canceled is refused (turn_ended), and the next turn does not see it', async () => {
    const task = 'task-turn-save-after-end'
    const first = await A.delegate({ to_agent: B.agentId, task_id: task, capability: TALK, input: { save: true } })
    await until(() => gates.has(first.run_id), 'the first turn\'s handler to wait')
    await A.cancel(first.run_id, 'the user moved on')
    await until(async () => (await B.runs.getRun(first.run_id)).state === 'failed', 'the executor to end the turn')
    gates.get(first.run_id)!.resolve()
    await until(() => saves.has(first.run_id), 'the handler to save')
    expect(await saves.get(first.run_id)).toBe('refused: INVALID_TRANSITION {"reason":"turn_ended"}')
    const second = await A.delegate({ to_agent: B.agentId, task_id: task, capability: TALK, input: {}, continue_run: first.run_id })
    expect(second).toMatchObject({ turn: 2, previous_turn: first.run_id })
    await until(() => seen.has(second.run_id), 'the second turn\'s handler')
    expect(seen.get(second.run_id)).toBeNull()
  })
})
