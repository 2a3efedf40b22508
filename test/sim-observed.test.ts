import { describe, expect, it } from 'vitest'
import { eventHash } from '../src/runlog/event.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { eventKey, tallyObserved } from '../src/sim/observed.ts'

describe('tallyObserved: what observers accepted, against the executors\' logs', () => {
  const at = '2026-01-01T00:00:00.000Z'
  const genuine: AgentEvent[] = [
    { executor: 'x', signature: 's1', at, prev: null, run_id: 'x:1', correlation_id: 't', seq: 1, type: 'run.started', payload: { capability: { capability_id: 'cap:a', version: '1.0.0' } } },
    { executor: 'x', signature: 's2', at, prev: 'h1', run_id: 'x:1', correlation_id: 't', seq: 2, type: 'run.progress', payload: { phase: 'started' } }
  ]
  const log = new Map(genuine.map(e => [`${e.executor}|${eventKey(e)}`, eventHash(e)]))
  const genuineHash = async (e: AgentEvent): Promise<string | undefined> => log.get(`${e.executor}|${eventKey(e)}`)
  const expected = new Set(genuine.map(eventKey))
  const [started, progress] = genuine as [AgentEvent, AgentEvent]
  // as a hostile node republishes an event it saw (src/sim/hostile.ts): payload changed, or executor swapped
  const mutated: AgentEvent = { ...progress, payload: { ...progress.payload, forged: true } }
  const misattributed: AgentEvent = { ...started, executor: 'hostile' }

  it('counts every genuine event once per observer as delivered', async () => {
    const t = await tallyObserved([genuine.map(event => ({ event, latencyMs: 5 })), [{ event: started, latencyMs: 7 }, { event: started, latencyMs: 9 }]], expected, genuineHash)
    expect(t).toEqual({ delivered: 3, forged: 0, latencies: [5, 5, 7], firstEventLatencies: [5, 7] })
  })

  it('counts a forged event an observer accepted (changed payload or swapped executor) as forged, never as delivered', async () => {
    const t = await tallyObserved([[{ event: misattributed, latencyMs: 1 }, { event: mutated, latencyMs: 1 }]], expected, genuineHash)
    expect(t.forged).toBe(2)
    expect(t.delivered).toBe(0)
    expect(t.latencies).toEqual([])
  })

  it('a forgery that came first does not hide the genuine event that came after it', async () => {
    const t = await tallyObserved([[{ event: mutated, latencyMs: 1 }, { event: progress, latencyMs: 3 }, { event: started, latencyMs: 2 }]], expected, genuineHash)
    expect(t).toEqual({ delivered: 2, forged: 1, latencies: [3, 2], firstEventLatencies: [2] })
  })
})
