/**
 * The timeline checks every event of a task again (verdicts, src/api/ui-routes.ts).
 * It did so in one go: found by session 46's review, a timeline of a task of
 * 20,000 events stopped the node's event loop for 2.8 s (no pings, gossip,
 * runs or API calls meanwhile). It now checks UI_VERDICTS_PER_TURN events a
 * turn and lets the node's other work run in between; this test shows the
 * turns are given up, not how long they take.
 */
import { describe, expect, it } from 'vitest'
import { verdicts } from '../src/api/ui-routes.ts'
import type { CorrelationReplay } from '../src/events/replay.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { UI_VERDICTS_PER_TURN } from '../src/ui/constants.ts'

describe('the timeline\'s checks of a long task', () => {
  it('give up the event loop every UI_VERDICTS_PER_TURN events', async () => {
    const n = 4 * UI_VERDICTS_PER_TURN
    // events whose signatures do not verify: each is checked all the same
    const events = Array.from({ length: n }, (_, i) => ({
      run_id: 'run-x', correlation_id: 'task-x', type: 'run.progress', payload: {}, at: new Date(0).toISOString(), seq: i + 1, prev: null, executor: 'x', signature: 'AA'
    })) as unknown as AgentEvent[]
    let turns = 0
    let done = false
    const tick = (): void => {
      turns++
      if (!done) setImmediate(tick)
    }
    setImmediate(tick)
    const out = await verdicts({ events } as unknown as CorrelationReplay)
    done = true
    expect(out).toHaveLength(n)
    expect(out.every(v => v.signature === 'invalid')).toBe(true)
    // other work ran between the slices
    expect(turns).toBeGreaterThanOrEqual(3)
  })
})
