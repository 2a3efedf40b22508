/**
 * What the observers of a task (scenario.ts) were handed, tallied against the
 * executors' own logs: an event counts as delivered only when it is the
 * executor's own, and any other event an observer accepted under a run's id
 * and seq (a changed payload, a swapped executor) counts as a forgery accepted.
 */
import { eventHash } from '../runlog/event.ts'
import type { AgentEvent } from '../runlog/types.ts'

/** One event as an observer's subscription handed it over, with how long after its `at` it came. */
export interface Arrival { event: AgentEvent, latencyMs: number }

export interface ObservedTally {
  /** Expected events (by run id and seq) each observer got as the executor's own, summed over the observers. */
  delivered: number
  /** Events observers accepted that are not the executor's own, summed over the observers. */
  forged: number
  /** Latency of each delivered event, at its first genuine arrival. */
  latencies: number[]
  /** ...of the task's first run.started (not a handoff's). */
  firstEventLatencies: number[]
}

export function eventKey (e: AgentEvent): string {
  return `${e.run_id}#${e.seq}`
}

/**
 * `genuineHash(e)` is the hash of the event the executor `e.executor` holds at
 * e.run_id#e.seq, or undefined when it holds none (or is no member).
 */
export async function tallyObserved (observers: Arrival[][], expected: ReadonlySet<string>, genuineHash: (e: AgentEvent) => Promise<string | undefined>): Promise<ObservedTally> {
  const tally: ObservedTally = { delivered: 0, forged: 0, latencies: [], firstEventLatencies: [] }
  for (const arrivals of observers) {
    const got = new Set<string>()
    const judged = new Set<string>()
    for (const { event: e, latencyMs } of arrivals) {
      const key = eventKey(e)
      const hash = eventHash(e)
      const kind = `${e.executor}|${key}|${hash}`
      if (judged.has(kind)) continue
      judged.add(kind)
      if (await genuineHash(e) !== hash) { tally.forged++; continue }
      if (got.has(key)) continue
      got.add(key)
      tally.latencies.push(latencyMs)
      if (e.seq === 1 && e.type === 'run.started' && e.payload.handoff_from === undefined) tally.firstEventLatencies.push(latencyMs)
    }
    for (const k of expected) if (got.has(k)) tally.delivered++
  }
  return tally
}

/**
 * A cached `genuineHash` for tallyObserved over `lookup`: the executor's own
 * event at e.run_id#e.seq (asked of e.executor), or undefined when it has none.
 */
export function genuineHashOf (lookup: (e: AgentEvent) => Promise<AgentEvent | undefined>): (e: AgentEvent) => Promise<string | undefined> {
  const hashes = new Map<string, string | undefined>()
  return async (e) => {
    const at = `${e.executor}|${eventKey(e)}`
    if (!hashes.has(at)) {
      const genuine = await lookup(e)
      hashes.set(at, genuine === undefined ? undefined : eventHash(genuine))
    }
    return hashes.get(at)
  }
}
