/**
 * Forks of a run's log: two events at one seq of one run, both signed by its
 * executor. An honest executor never signs two (an event is signed once, when
 * it is committed, and only committed events leave the node), so the pair is
 * the proof that the executor equivocated: the case that matters is two
 * handoffs of one run, to two receivers, each confirmed with its own handoff
 * event, so each starts a successor while every holder admits only the one
 * whose event it placed first (protocols/handoff.md, Forks).
 *
 * Placement finds a fork where it holds a run's head and another event
 * arrives at that seq; liveness verdicts (signed by the delegator, replaced by
 * the executor's own event at their seq) are no fork. The node keeps the
 * last EVENTS_FORKS_MAX proofs, relays the other event once (so every holder
 * gets both), and tells the run service, whose delegator cancels every
 * successor the two name: no task line goes on from a fork.
 */
import { canonicalJson } from '../identity/signing.ts'
import type { Logger } from '../logger.ts'
import { isTerminal, type AgentEvent } from '../runlog/types.ts'
import { makeRoom } from '../util/bounded.ts'
import { EVENTS_FORKS_MAX } from './constants.ts'
import { stateAfter } from './replay.ts'
import type { CorrTrack } from './track.ts'

export interface RunFork {
  correlation_id: string
  run_id: string
  seq: number
  /** The executor that signed both. */
  executor: string
  /** The event held here first, then the other. */
  events: [AgentEvent, AgentEvent]
}

/**
 * Whether `e` forks the run whose head here is `held`, both the executor's
 * own: another event at the head's seq, or an ending at a seq below it (the
 * run went on past the seq at which `e` ends it: no compare with the event
 * held there is needed, nor is it in memory).
 */
export function forks (held: AgentEvent, e: AgentEvent): boolean {
  if (e.run_id !== held.run_id || e.signature === held.signature || e.seq > held.seq) return false
  if (held.declared_by !== undefined || e.declared_by !== undefined) return false
  if (e.seq < held.seq) return isTerminal(stateAfter(e))
  // one content under two signatures is the same event (its signer chose another nonce): not two
  const { signature: _a, ...a } = held
  const { signature: _b, ...b } = e
  return canonicalJson(a) !== canonicalJson(b)
}

export interface ForksInit {
  log: Logger
  /** Publish the event held here on the correlation's topic: whoever holds the other one gets the proof too. */
  republish: (t: CorrTrack, e: AgentEvent) => void
  /** Told once per fork found (the node's run service acts on it). */
  onFork?: (fork: RunFork) => void
}

export class Forks {
  private readonly i: ForksInit
  private readonly byRun = new Map<string, RunFork>()
  /** Forks found since start (the oldest proofs past EVENTS_FORKS_MAX make room for new ones). */
  found = 0

  constructor (init: ForksInit) {
    this.i = init
  }

  /**
   * Placement found `e` at the seq of the head `held` of a run of `t`: keep
   * the proof, spread the held event, and say so. True the first time for the
   * run, when `e` is to be relayed.
   */
  seen (t: CorrTrack, held: AgentEvent, e: AgentEvent): boolean {
    const fork = this.note(held, e)
    if (fork === undefined) return false
    this.i.log.warn({ run_id: fork.run_id, seq: fork.seq, executor: fork.executor, correlation_id: fork.correlation_id },
      'the executor of a run signed two events at one seq: its log is forked, and the successors either names are ended')
    this.i.republish(t, held)
    this.i.onFork?.(fork)
    return true
  }

  /** Keep the proof that `e` forks the run at `held`; undefined when this run's fork is known already. */
  private note (held: AgentEvent, e: AgentEvent): RunFork | undefined {
    if (this.byRun.has(held.run_id)) return undefined
    this.found++
    const fork: RunFork = { correlation_id: held.correlation_id, run_id: held.run_id, seq: e.seq, executor: held.executor, events: [held, e] }
    // the oldest goes (a run's fork is acted on once while its proof is kept: each new one costs its sender a
    // signed event per run, and this node one relay)
    makeRoom(this.byRun, EVENTS_FORKS_MAX)
    this.byRun.set(held.run_id, fork)
    return fork
  }

  /** The forks kept of a correlation's runs. */
  of (correlationId: string): RunFork[] {
    return [...this.byRun.values()].filter(f => f.correlation_id === correlationId)
  }

  get size (): number {
    return this.byRun.size
  }
}
