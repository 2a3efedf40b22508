/**
 * Contract 4 from the successor's side: a run that claims to take over a run
 * (its run.started names it as handoff_from) must be the run that run handed
 * off to. A second run claiming the same predecessor is two owners of one task.
 */
import { describe, expect, it } from 'vitest'
import { checkTrace } from '../src/sim/contracts.ts'

describe('checkTrace: every handoff_from claim matches its predecessor\'s handoff', () => {
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

  it('still passes the good trace', () => {
    expect(checkTrace('t', good, expect1).ok).toBe(true)
  })

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
