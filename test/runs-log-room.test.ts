/**
 * A run's log holds EVENTS_MAX_EVENTS_PER_RUN events at most: no follower
 * places an event past it, its end included. So the state machine keeps the
 * last seqs for what must still follow: progress needs room for the end, a
 * block room for its resume and the end (INVALID_TRANSITION, reason
 * run_log_full); ending the run always fits. Before, a handler that reported
 * progress without end (an A2A server streaming a status per token) pushed
 * its run's end past what any follower takes: the run ended for its executor
 * only. Found by session 45's A2A review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_MAX_EVENTS_PER_RUN } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { transition } from '../src/runs/state-machine.ts'
import type { RunCommand } from '../src/runs/types.ts'
import type { Run } from '../src/runlog/types.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:log-room', version: '1.0.0' }
const X = '12D3KooWExecutorExecutorExecutorExecutorExecutor1'
const D = '12D3KooWDelegatorDelegatorDelegatorDelegatorDeleg'
const NOW = '2026-01-01T00:00:01.000Z'

function at (lastSeq: number, state: Run['state'] = 'running'): Run {
  return {
    run_id: `${X}:00112233`, agent_id: X, correlation_id: 't', state, created_at: '2026-01-01T00:00:00.000Z', updated_at: '2026-01-01T00:00:00.000Z',
    capability: CAP, delegator: D, authorized: [], parent_run: null, handoff_from: null, handoff_to: null,
    checkpoint_id: state === 'blocked' ? 'cp' : null, block_reason: null, output: null, failure: null, last_seq: lastSeq
  }
}

const executor = { role: 'executor' } as const
const delegator = { role: 'delegator', agent_id: D } as const
const progress: RunCommand = { type: 'progress', payload: {} }
const block: RunCommand = { type: 'block', reason: 'r', checkpoint_id: 'cp' }
const resume: RunCommand = { type: 'resume', resolution: {} }

function reason (run: Run, command: RunCommand, actor: typeof executor | typeof delegator): string {
  const out = transition(run, command, actor, NOW)
  return out.ok ? 'ok' : String(out.error.details?.reason ?? out.error.code)
}

describe('the last seqs of a run\'s log are kept for its end', () => {
  const max = EVENTS_MAX_EVENTS_PER_RUN

  it('progress and resume need one seq after theirs, a block two; the end always fits', () => {
    expect(reason(at(max - 2), progress, executor)).toBe('ok')
    expect(reason(at(max - 1), progress, executor)).toBe('run_log_full')
    expect(reason(at(max - 3), block, executor)).toBe('ok')
    expect(reason(at(max - 2), block, delegator)).toBe('run_log_full')
    expect(reason(at(max - 2, 'blocked'), resume, delegator)).toBe('ok')
    expect(reason(at(max - 1, 'blocked'), resume, delegator)).toBe('run_log_full')
    expect(reason(at(max - 1), { type: 'complete', output: {} }, executor)).toBe('ok')
    expect(reason(at(max - 1, 'blocked'), { type: 'cancel', reason: 'x' }, delegator)).toBe('ok')
    expect(reason(at(max - 1), { type: 'fail', code: 'HANDLER_FAILED', message: 'x' }, executor)).toBe('ok')
    expect(reason(at(max - 1), { type: 'handoff', to: { run_id: 'Y:1', agent_id: 'Y' } }, executor)).toBe('ok')
    // a run that blocked on the last seq its resume could follow is resumed, and then only ends
    const blocked = transition(at(max - 3), block, executor, NOW)
    expect(blocked.ok).toBe(true)
  })

  it('a full log refuses with INVALID_TRANSITION, the typed error the other state checks give', () => {
    const out = transition(at(max - 1), progress, executor, NOW)
    expect(out.ok).toBe(false)
    if (!out.ok) {
      expect(out.error.code).toBe('INVALID_TRANSITION')
      expect(out.error.details).toMatchObject({ reason: 'run_log_full', max })
    }
  })

  describe('a handler whose run\'s log is full', () => {
    let A: MeshNode, B: MeshNode
    const outcome = Promise.withResolvers<string>()
    const go = Promise.withResolvers<void>()

    beforeAll(async () => {
      ;[A, B] = await startLoneNodes(2) as [MeshNode, MeshNode]
      B.runs.handle(CAP, async (ctx) => {
        await go.promise
        try {
          await ctx.progress({ step: 'one too many' })
          outcome.resolve('reported')
        } catch (err) {
          const e = err as { code?: string, details?: { reason?: string } }
          outcome.resolve(`${e.code ?? String(err)} ${e.details?.reason ?? ''}`)
        }
        return { ended: true }
      })
      await B.publishCard({ name: 'b', capabilities: [CAP] })
      await A.join(B.addresses)
    })
    afterAll(async () => { await stopAll([A, B]) })

    it('is told run_log_full by ctx.progress, and its run still ends for its delegator', async () => {
      const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-log-room', capability: CAP, input: {} })
      // the executor's record of the run as if it had reported progress all the way up to the bound
      const active = (B.runs as unknown as { executor: { active: Map<string, { run: Run }> } }).executor.active
      await until(() => active.has(run.run_id), 'the run to start')
      const held = active.get(run.run_id)!
      held.run = { ...held.run, last_seq: max - 1 }
      go.resolve()
      expect(await outcome.promise).toBe('INVALID_TRANSITION run_log_full')
      await until(async () => (await A.runs.getRun(run.run_id)).state === 'completed', 'the run to end')
    })
  })
})
