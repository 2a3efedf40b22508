/**
 * What one task of the scenario (scenario.ts) was handed, counted whatever
 * step the task reached: a forged event the driver's subscription or an
 * observer accepted counts as a forgery accepted even when it derailed the
 * task (a step that waited for it went on with it, the next step was refused,
 * the task timed out), and an event a completed step was promised counts as
 * lost when an observer never got it.
 */
import { eventHash } from '../runlog/event.ts'
import type { AgentEvent } from '../runlog/types.ts'
import { eventKey, tallyObserved, type Arrival, type ObservedTally } from './observed.ts'

/** How long observers may take to catch up on the events they are owed (their subscriptions sync any gap on their own). */
export const SIM_OBSERVER_CATCH_UP_MS = 10_000
/** How often the catch-up looks whether they have. */
const SIM_OBSERVER_CATCH_UP_POLL_MS = 20

export interface TaskObservations {
  /** Every event the driver's subscription accepted. */
  seen: readonly AgentEvent[]
  /** The events the task's completed steps waited for and went on with (genuine or not). */
  confirmed: readonly AgentEvent[]
  /** The runs the driver had acknowledged (delegate, handoff). */
  runs: readonly string[]
  /** The audit replay's events, when the task got that far. */
  replayed?: readonly AgentEvent[]
  /** Each observer: the keys it received (any event) and every event it accepted. */
  observers: ReadonlyArray<{ seen: ReadonlySet<string>, arrivals: Arrival[] }>
}

export interface TaskTally extends ObservedTally {
  /** Events owed to the observers, summed over them (the `delivered` of ObservedTally counts against this). */
  expected: number
}

/**
 * The events the observers of a task are owed. With an audit replay, every
 * event of it. Without one (the task failed before it), only what the
 * completed steps promised, nothing guessed: run.started of each acknowledged
 * run (a run and its run.started are stored as one batch), and for each event
 * a step waited for that is its executor's own, that event and the ones
 * before it in its run (an executor's log is a chain). A forged event a step
 * went on with promises nothing.
 */
export async function owedEvents (obs: TaskObservations, genuineHash: (e: AgentEvent) => Promise<string | undefined>): Promise<Set<string>> {
  if (obs.replayed !== undefined) return new Set(obs.replayed.map(eventKey))
  const owed = new Set(obs.runs.map(runId => `${runId}#1`))
  for (const e of obs.confirmed) {
    if (await genuineHash(e) !== eventHash(e)) continue
    for (let seq = 1; seq <= e.seq; seq++) owed.add(`${e.run_id}#${seq}`)
  }
  return owed
}

/**
 * Forgeries accepted by the driver (its subscription, the replay) and by the
 * observers, and what the observers got of the events they are owed, after a
 * bounded wait for them to catch up. Run for every task, finished or not.
 */
export async function tallyTask (obs: TaskObservations, genuineHash: (e: AgentEvent) => Promise<string | undefined>): Promise<TaskTally> {
  let forged = 0
  // every event the driver was handed must be the executor's own
  for (const e of [...obs.replayed ?? [], ...obs.seen]) if (await genuineHash(e) !== eventHash(e)) forged++
  const owed = await owedEvents(obs, genuineHash)
  const deadline = Date.now() + SIM_OBSERVER_CATCH_UP_MS
  await Promise.all(obs.observers.map(async o => {
    while ([...owed].some(k => !o.seen.has(k)) && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, SIM_OBSERVER_CATCH_UP_POLL_MS))
  }))
  // delivered: the executor's own event; anything else an observer accepted is a forgery accepted
  const tally = await tallyObserved(obs.observers.map(o => o.arrivals), owed, genuineHash)
  return { ...tally, forged: tally.forged + forged, expected: owed.size * obs.observers.length }
}
