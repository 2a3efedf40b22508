import { describe, expect, it } from 'vitest'
import { checkTrace } from '../src/sim/contracts.ts'

/** A task's trace as the scenario produces it: x blocks, is resumed, hands off to y, y completes. */
describe('checkTrace on traces a finished task must not pass', () => {
  const at = '2026-01-01T00:00:00.000Z'
  const cap = { capability_id: 'cap:a', version: '1.0.0' }
  const ev = (executor: string, run: string, seq: number, type: 'run.started' | 'run.progress' | 'run.blocked' | 'run.completed' | 'run.failed', payload: Record<string, unknown>) =>
    ({ executor, signature: 's', at, prev: null, run_id: run, correlation_id: 't', seq, type, payload })
  const good = [
    ev('x', 'x:1', 1, 'run.started', { capability: cap }),
    ev('x', 'x:1', 2, 'run.progress', { phase: 'started' }),
    ev('x', 'x:1', 3, 'run.blocked', { checkpoint_id: 'cp', reason: 'r', by: 'd' }),
    ev('x', 'x:1', 4, 'run.progress', { transition: 'resume', checkpoint_id: 'cp', resolution: { ok: 1 }, by: 'd' }),
    ev('x', 'x:1', 5, 'run.progress', { phase: 'resumed' }),
    ev('x', 'x:1', 6, 'run.completed', { transition: 'handoff', handoff_to: { run_id: 'y:1', agent_id: 'y' }, by: 'd' }),
    ev('y', 'y:1', 1, 'run.started', { capability: cap, handoff_from: { run_id: 'x:1', agent_id: 'x' } }),
    ev('y', 'y:1', 2, 'run.progress', { phase: 'took over' }),
    ev('y', 'y:1', 3, 'run.completed', { output: {} })
  ]
  const expect1 = { resolutions: { cp: { ok: 1 } }, transfers: 1, raisedBy: 'd', complete: true }

  it('passes the whole trace of a finished task', () => {
    const v = checkTrace('t', good, expect1)
    expect([v.capability_ref, v.task_correlation, v.checkpoint_block, v.ownership_handoff].flatMap(c => c.problems)).toEqual([])
    expect(v.ok).toBe(true)
  })

  it('fails a truncated trace whose handoff run has only run.started', () => {
    const truncated = good.filter(e => !(e.run_id === 'y:1' && e.seq > 1))
    const v = checkTrace('t', truncated, expect1)
    expect(v.ok).toBe(false)
    expect(v.task_correlation.problems).toEqual(['y:1: run has no end in the trace (last is run.started #1)'])
  })

  it('fails a chain whose last run is a handoff or a failure, not a completion', () => {
    const failed = good.map(e => e.run_id === 'y:1' && e.seq === 3 ? { ...e, type: 'run.failed' as const, payload: { failure: { code: 'HANDLER_FAILED', message: 'm' } } } : e)
    expect(checkTrace('t', failed, expect1).task_correlation.problems).toEqual(['y:1: the task\'s last run ends in run.failed, not run.completed'])
  })

  it('fails a blocked run that reports progress and completes without a resume', () => {
    const selfResumed = [
      ...good.slice(0, 3),
      ev('x', 'x:1', 4, 'run.progress', { phase: 'went on' }),
      ev('x', 'x:1', 5, 'run.completed', { output: {} })
    ]
    const v = checkTrace('t', selfResumed, { raisedBy: 'd' })
    expect(v.checkpoint_block.ok).toBe(false)
    expect(v.checkpoint_block.problems).toContain('x:1#4: run.progress while checkpoint cp is open, before any resume')
  })

  it('fails a blocked run that completes directly', () => {
    const v = checkTrace('t', [...good.slice(0, 3), ev('x', 'x:1', 4, 'run.completed', { output: {} })], { raisedBy: 'd' })
    expect(v.checkpoint_block.problems).toEqual(['x:1#4: run.completed while checkpoint cp is open, before any resume'])
  })

  it('accepts what the delegator may do to a blocked run: cancel it or hand it off', () => {
    const canceled = [...good.slice(0, 3), ev('x', 'x:1', 4, 'run.failed', { failure: { code: 'CANCELED', message: 'm' }, reason: 'canceled', by: 'd' })]
    expect(checkTrace('t', canceled, { raisedBy: 'd' }).checkpoint_block.problems).toEqual([])
    const handedOff = [...good.slice(0, 3), { ...good[5]!, seq: 4 }, ...good.slice(6)]
    expect(checkTrace('t', handedOff, { raisedBy: 'd' }).ok).toBe(true)
    // the executor's own handoff of a blocked run is it going on by itself
    const own = [...good.slice(0, 3), { ...good[5]!, seq: 4, payload: { ...good[5]!.payload, by: 'x' } }, ...good.slice(6)]
    expect(checkTrace('t', own, { raisedBy: 'd' }).checkpoint_block.ok).toBe(false)
  })

  // a blocked run must not resume itself: only its delegator (the coordinator that raised the checkpoint) resumes it
  it('fails a resume by the run\'s own executor, or by anyone but the coordinator', () => {
    const resumedBy = (by: string) => good.map(e => e.run_id === 'x:1' && e.seq === 4 ? { ...e, payload: { ...e.payload, by } } : e)
    const self = checkTrace('t', resumedBy('x'), expect1)
    expect(self.checkpoint_block.ok).toBe(false)
    expect(self.checkpoint_block.problems).toContain('x:1#4: resumed by its own executor x')
    expect(self.ok).toBe(false)
    // without raisedBy the executor's own resume still fails
    expect(checkTrace('t', resumedBy('x'), { resolutions: { cp: { ok: 1 } } }).checkpoint_block.problems).toContain('x:1#4: resumed by its own executor x')
    const other = checkTrace('t', resumedBy('z'), expect1)
    expect(other.checkpoint_block.problems).toContain('x:1#4: resumed by z, not the coordinator')
    // an agent other than the executor, with no coordinator to compare with, may resume
    expect(checkTrace('t', resumedBy('z'), { resolutions: { cp: { ok: 1 } } }).checkpoint_block.problems).toEqual([])
  })

  it('fails a handoff whose named new owner is not the next run\'s executor', () => {
    const swapped = good.map(e => e.run_id === 'y:1' ? { ...e, executor: 'z' } : e)
    const v = checkTrace('t', swapped, expect1)
    expect(v.ownership_handoff.problems).toEqual(['x:1: handoff names y as the new owner, but y:1 is executed by z'])
  })

  // contract 4 from the successor's side: a run claiming to take over a run (handoff_from) must be the run
  // that run handed off to; a second run claiming the same predecessor is two owners of one task
  it('flags a second run that takes over the run already handed off to another', () => {
    const forked = [
      ...good,
      ev('z', 'z:1', 1, 'run.started', { capability: cap, handoff_from: { run_id: 'x:1', agent_id: 'x' } }),
      ev('z', 'z:1', 2, 'run.completed', { output: {} })
    ]
    const v = checkTrace('t', forked, expect1)
    expect(v.ownership_handoff.problems).toEqual(['z:1: run.started names x:1 as handoff_from, but x:1 handed off to y:1'])
    expect(v.ok).toBe(false)
  })

  it('flags a claimed predecessor that is missing from a complete trace, or that ended without a handoff', () => {
    const orphan = [
      ...good,
      ev('z', 'z:1', 1, 'run.started', { capability: cap, handoff_from: { run_id: 'w:1', agent_id: 'w' } }),
      ev('z', 'z:1', 2, 'run.completed', { output: {} })
    ]
    expect(checkTrace('t', orphan, expect1).ownership_handoff.problems).toEqual(['z:1: run.started names w:1 as handoff_from, but w:1 is missing from the trace'])
    // without `complete` the trace may be a part of the task: a predecessor not in it is not flagged
    expect(checkTrace('t', orphan, { transfers: 1 }).ownership_handoff.problems).toEqual([])
    const notHandedOff = [
      ...good,
      ev('w', 'w:1', 1, 'run.started', { capability: cap }),
      ev('w', 'w:1', 2, 'run.completed', { output: {} }),
      ev('z', 'z:1', 1, 'run.started', { capability: cap, handoff_from: { run_id: 'w:1', agent_id: 'w' } }),
      ev('z', 'z:1', 2, 'run.completed', { output: {} })
    ]
    expect(checkTrace('t', notHandedOff, { transfers: 1 }).ownership_handoff.problems).toEqual(['z:1: run.started names w:1 as handoff_from, but w:1 ends in run.completed, not a handoff'])
  })
})
