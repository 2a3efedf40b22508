/**
 * A run handed back to its own delegator "blocks only when it names an
 * authorized agent other than itself" (protocols/control.md). A delegator
 * that listed itself in `authorized` and got its run back could block it,
 * and then nobody could move it: its own resume is INVALID_TRANSITION (an
 * executor never resumes its run), its cancel UNAUTHORIZED, liveness does not
 * watch it. Found by session 45's review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { transition } from '../src/runs/state-machine.ts'
import type { Run } from '../src/runlog/types.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:handback-block', version: '1.0.0' }
const X = '12D3KooWExecutorExecutorExecutorExecutorExecutor1'
const Y = '12D3KooWAnotherAgentAnotherAgentAnotherAgentAnoth'

function handedBack (authorized: string[]): Run {
  return {
    run_id: `${X}:00112233`, agent_id: X, correlation_id: 't', state: 'running', created_at: '2026-01-01T00:00:00.000Z', updated_at: '2026-01-01T00:00:00.000Z',
    capability: CAP, delegator: X, authorized, parent_run: null, handoff_from: null, handoff_to: null, checkpoint_id: null, block_reason: null, output: null, failure: null, last_seq: 1
  }
}

describe('the block of a run handed back to its delegator', () => {
  it('the state machine: an executor naming only itself as authorized is nobody who could resume; another agent is', () => {
    const block = { type: 'block', reason: 'r', checkpoint_id: 'cp' } as const
    for (const authorized of [[], [X], [X, X]]) {
      const out = transition(handedBack(authorized), block, { role: 'executor' }, '2026-01-01T00:00:01.000Z')
      expect(out.ok ? 'blocked' : out.error.code).toBe('INVALID_TRANSITION')
    }
    const out = transition(handedBack([X, Y]), block, { role: 'executor' }, '2026-01-01T00:00:01.000Z')
    expect(out.ok && out.result.run.state).toBe('blocked')
  })

  describe('real nodes', () => {
    let A: MeshNode, B: MeshNode
    const outcome = Promise.withResolvers<string>()

    beforeAll(async () => {
      ;[A, B] = await startLoneNodes(2) as [MeshNode, MeshNode]
      // B hands every run back to A; A, executing it, tries to block it
      B.runs.handle(CAP, async (ctx) => { await ctx.handoff(A.agentId, { back: true }); return {} })
      A.runs.handle(CAP, async (ctx) => {
        try {
          await ctx.block('waiting for someone', 'cp-handback')
          outcome.resolve('blocked')
        } catch (err) {
          outcome.resolve((err as { code?: string }).code ?? String(err))
        }
        return { went_on: true }
      })
      await A.publishCard({ name: 'a', capabilities: [CAP] })
      await B.publishCard({ name: 'b', capabilities: [CAP] })
      await A.join(B.addresses)
    })
    afterAll(async () => {
      await stopAll([A, B])
    })

    it('the block is refused with INVALID_TRANSITION and the run goes on to its end', async () => {
      const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-handback-block', capability: CAP, input: {}, authorized: [A.agentId] })
      expect(await outcome.promise).toBe('INVALID_TRANSITION')
      let successor = ''
      await until(async () => {
        successor = (await A.runs.getRun(run.run_id)).handoff_to?.run_id ?? ''
        return successor !== '' && (await A.runs.getRun(successor)).state === 'completed'
      }, 'the run handed back to A to complete')
      expect((await A.runs.getRun(successor)).output).toEqual({ went_on: true })
    })
  })
})
