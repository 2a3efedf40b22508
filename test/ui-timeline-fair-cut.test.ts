/**
 * The view's timeline cut (src/api/ui-timeline.ts) when one run of a task
 * has more events than the view draws. It kept the newest by the events'
 * `at`, which each executor signs by its own clock: an executor that signs
 * a time years ahead kept its run's events in the cut and pushed out every
 * other run's, however new (left alone by session 56's review). Now each
 * run keeps its newest by seq and the runs share the cut.
 */
import { describe, expect, it } from 'vitest'
import { timelineAnswer } from '../src/api/ui-timeline.ts'
import type { CorrelationReplay } from '../src/events/replay.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { UI_TIMELINE_EVENTS_MAX } from '../src/ui/constants.ts'

const CORR = 'task-fair-cut'

function eventsOf (runId: string, executor: string, n: number, at: (i: number) => string): AgentEvent[] {
  return Array.from({ length: n }, (_, i) => ({
    run_id: runId,
    correlation_id: CORR,
    type: i === 0 ? 'run.started' : 'run.progress',
    payload: {},
    at: at(i),
    seq: i + 1,
    prev: null,
    executor,
    signature: 'unsigned'
  }))
}

function replayOf (events: AgentEvent[]): CorrelationReplay {
  return { correlation_id: CORR, owner: null, rejected_runs: [], unreached: [], forks: [], runs: [], contexts: [], events, transitions: [], checkpoints: [] }
}

const heldOf = (answer: unknown): AgentEvent[] => (answer as { replay: { events: AgentEvent[] } }).replay.events

describe('the timeline cut of a task whose runs have more events than the view draws', () => {
  it('keeps a short run\'s events though another run signs times years ahead', async () => {
    const now = Date.now()
    const ahead = eventsOf('run-ahead', 'agent-ahead', UI_TIMELINE_EVENTS_MAX + 100, i => new Date(Date.UTC(2099, 0, 1) + i).toISOString())
    const honest = eventsOf('run-honest', 'agent-honest', 5, i => new Date(now + i).toISOString())
    const held = heldOf(await timelineAnswer(replayOf([...ahead, ...honest]), UI_TIMELINE_EVENTS_MAX))
    expect(held).toHaveLength(UI_TIMELINE_EVENTS_MAX)
    // before: none of the honest run's (the cut took the 300 newest by `at`, all the run signed in 2099)
    expect(held.filter(e => e.run_id === 'run-honest').map(e => e.seq)).toEqual([1, 2, 3, 4, 5])
    // the long run keeps its newest by seq, in replay order
    const long = held.filter(e => e.run_id === 'run-ahead').map(e => e.seq)
    expect(long).toHaveLength(UI_TIMELINE_EVENTS_MAX - 5)
    expect(long[0]).toBe(ahead.length - long.length + 1)
    expect(long.at(-1)).toBe(ahead.length)
  })

  it('shares the cut evenly between runs that both have more than their share', async () => {
    const when = (i: number): string => new Date(Date.UTC(2026, 0, 1) + i).toISOString()
    const a = eventsOf('run-a', 'agent-a', UI_TIMELINE_EVENTS_MAX, when)
    const b = eventsOf('run-b', 'agent-b', UI_TIMELINE_EVENTS_MAX, i => new Date(Date.UTC(2099, 0, 1) + i).toISOString())
    const held = heldOf(await timelineAnswer(replayOf([...a, ...b]), 11))
    expect(held).toHaveLength(11)
    const count = (id: string): number => held.filter(e => e.run_id === id).length
    expect([count('run-a'), count('run-b')].sort()).toEqual([5, 6])
    // in replay order: run-a's before run-b's
    expect(held.findIndex(e => e.run_id === 'run-b')).toBe(count('run-a'))
  })
})

describe('the timeline of a task with many blocked runs', () => {
  it('keeps each blocked run\'s last checkpoint however old its block, and no older one the cut does not hold', async () => {
    const RUNS = 64
    const BLOCKS = 8
    const checkpoints: CorrelationReplay['checkpoints'] = []
    for (let i = 0; i < RUNS; i++) {
      for (let k = 0; k < BLOCKS; k++) {
        checkpoints.push({ run_id: `run-${i}`, checkpoint_id: `cp-${k}`, reason: `r${k}`, blocked_seq: 2 + 2 * k, blocked_at: '', blocked_by: 'x', resumed_seq: k === BLOCKS - 1 ? null : 3 + 2 * k, resumed_at: null, resolved_by: null, resolution: null, attested: null } as unknown as CorrelationReplay['checkpoints'][number])
      }
    }
    const runs = Array.from({ length: RUNS }, (_, i) => ({ run_id: `run-${i}`, state: i % 2 === 0 ? 'blocked' : 'running', events: [] }) as unknown as CorrelationReplay['runs'][number])
    const answer = await timelineAnswer({ ...replayOf([]), runs, checkpoints }, UI_TIMELINE_EVENTS_MAX) as { replay: { checkpoints: Array<{ run_id: string, checkpoint_id: string }> } }
    expect(answer.replay.checkpoints.map(c => `${c.run_id}/${c.checkpoint_id}`)).toEqual(
      Array.from({ length: RUNS / 2 }, (_, i) => `run-${2 * i}/cp-${BLOCKS - 1}`))
  })
})
