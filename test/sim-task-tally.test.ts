/**
 * The scenario tallies every task whatever step it reached (src/sim/task-tally.ts):
 * a forged event the driver's subscription or an observer accepted counts as a
 * forgery accepted even when it derailed the task, and a failed task owes its
 * observers only what its completed steps promised.
 */
import { describe, expect, it } from 'vitest'
import { eventHash } from '../src/runlog/event.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { eventKey } from '../src/sim/observed.ts'
import { owedEvents, tallyTask } from '../src/sim/task-tally.ts'

describe('tallyTask: forgeries and lost events of a task, finished or not', () => {
  const at = '2026-01-01T00:00:00.000Z'
  const genuine: AgentEvent[] = [
    { executor: 'x', signature: 's1', at, prev: null, run_id: 'x:1', correlation_id: 't', seq: 1, type: 'run.started', payload: { capability: { capability_id: 'cap:a', version: '1.0.0' } } },
    { executor: 'x', signature: 's2', at, prev: 'h1', run_id: 'x:1', correlation_id: 't', seq: 2, type: 'run.progress', payload: { phase: 'started' } },
    { executor: 'x', signature: 's3', at, prev: 'h2', run_id: 'x:1', correlation_id: 't', seq: 3, type: 'run.blocked', payload: { checkpoint_id: 'cp', reason: 'r', by: 'd' } }
  ]
  const log = new Map(genuine.map(e => [`${e.executor}|${eventKey(e)}`, eventHash(e)]))
  const genuineHash = async (e: AgentEvent): Promise<string | undefined> => log.get(`${e.executor}|${eventKey(e)}`)
  const [started, progress, blocked] = genuine as [AgentEvent, AgentEvent, AgentEvent]
  // as a hostile node republishes an event it saw (src/sim/hostile.ts): the payload changed under the run's id and seq
  const forgedProgress: AgentEvent = { ...progress, payload: { ...progress.payload, forged: true } }
  const observer = (events: AgentEvent[]) => ({ seen: new Set(events.map(eventKey)), arrivals: events.map(event => ({ event, latencyMs: 1 })) })

  it('counts a forgery that derailed a task (the driver went on with it, the task then failed) as accepted', async () => {
    // the task failed after its first wait matched the forged progress: no replay
    const t = await tallyTask({
      seen: [started, forgedProgress],
      confirmed: [forgedProgress],
      runs: ['x:1'],
      observers: [observer([started, forgedProgress])]
    }, genuineHash)
    // one accepted by the driver's subscription, one by the observer
    expect(t.forged).toBe(2)
    // a forged event a step went on with promises nothing: only the acknowledged run's run.started is owed
    expect(t.expected).toBe(1)
    expect(t.delivered).toBe(1)
  })

  it('a failed task owes only what its completed steps promised, and counts what the observers missed of it', async () => {
    const obs = { seen: [started, progress, blocked], confirmed: [progress], runs: ['x:1'], observers: [observer([started, forgedProgress])] }
    // run.started of the acknowledged run, and the waited-for progress with what comes before it in its run; not the later block
    expect([...await owedEvents(obs, genuineHash)].sort()).toEqual(['x:1#1', 'x:1#2'])
    const t = await tallyTask(obs, genuineHash)
    expect(t).toMatchObject({ forged: 1, expected: 2, delivered: 1 })
  })

  it('a task that got to its replay owes the replay\'s events, and a forgery in the replay counts', async () => {
    const replayed = [started, forgedProgress, blocked]
    const t = await tallyTask({ seen: genuine, confirmed: [progress], runs: ['x:1'], replayed, observers: [observer(genuine)] }, genuineHash)
    expect(t).toMatchObject({ forged: 1, expected: 3, delivered: 3 })
  })
})
