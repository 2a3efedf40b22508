/**
 * Lineage: which runs belong to a task. A correlation (a task id) belongs to
 * the agent that started it, its owner (the root delegator); a run belongs to
 * the owner's task only when it proves its place (protocols/lineage.md):
 *
 * - a root run (no parent, no predecessor): its ticket is signed by the
 *   owner, who delegated it;
 * - a sub-delegation: its ticket is signed by the executor of its parent run,
 *   and the parent belongs;
 * - a handoff successor: its ticket is signed by the predecessor's executor
 *   and inherits from the chain's origin, the predecessor belongs, and the
 *   predecessor's own signed handoff event names this very run.
 *
 * Pure functions: the same logs always give the same answer. `judgeRun` is the
 * single rule, used incrementally by the events service as events arrive and
 * in one pass (`admitAll`) by replay.
 */
import type { SignatureCache } from './event.ts'
import { handoffTargetOf } from './handoff.ts'
import { originOf, ticketOf, type RunTicket } from './ticket.ts'
import type { AgentEvent } from './types.ts'

/** What the judge needs to know about another run of the correlation. */
export interface RunStanding {
  /** Undefined when the run.started carries no valid ticket (its verdict is then rejected). */
  ticket: RunTicket | undefined
  verdict: LineageVerdict
  /** The run its own handoff event names, once its log holds that event. */
  handoffTo: string | undefined
  /**
   * Its log ends with its executor's own terminal event (not a liveness
   * verdict, which the executor's event may still replace): a run that ended
   * without naming a successor will never name one.
   */
  ended?: boolean
}

/** A run's own last word, its handoff included: terminal, and from its executor (a delegator's liveness verdict is not). */
export function endsRun (e: AgentEvent | undefined): boolean {
  return e !== undefined && (e.type === 'run.completed' || e.type === 'run.failed') && e.declared_by === undefined
}

export type LineageVerdict =
  | { status: 'admitted', owner: string }
  | { status: 'pending', waitingFor: string }
  | { status: 'rejected', reason: string }

/**
 * Reasons a run is not in the task that blame no one (protocols/lineage.md):
 * a successor its predecessor did not name (an attempt a retried handoff
 * replaced), and a run past the task's limits on the judging node
 * (`over_limit`, given by the caller's lookup). A run that proves its place
 * under such a run carries its reason on, not a rejection of its own: its
 * executor followed the protocol.
 */
export const BLAMELESS_REASONS: ReadonlySet<string> = new Set(['not_named_by_predecessor', 'over_limit'])

/** An ancestor rejected with blame (or with no valid ticket): a run under it is rejected at once. */
function blamed (ancestor: RunStanding): boolean {
  return ancestor.ticket === undefined || (ancestor.verdict.status === 'rejected' && !BLAMELESS_REASONS.has(ancestor.verdict.reason))
}

function sameList (a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i])
}

/** The place of the run that `started` (its run.started) begins, given what is known of the others. */
export function judgeRun (started: AgentEvent, lookup: (runId: string) => RunStanding | undefined, signatures?: SignatureCache): LineageVerdict {
  const t = ticketOf(started, undefined, signatures)
  if (t === undefined) return { status: 'rejected', reason: 'no_valid_ticket' }
  if (t.handoff_from !== null) {
    const p = lookup(t.handoff_from.run_id)
    if (p === undefined) return { status: 'pending', waitingFor: t.handoff_from.run_id }
    const pt = p.ticket
    if (blamed(p) || pt === undefined) return { status: 'rejected', reason: 'predecessor_rejected' }
    if (pt.executor !== t.issuer || pt.depth + 1 !== t.depth || originOf(pt).signature !== originOf(t).signature ||
      pt.delegator !== t.delegator || pt.parent_run !== t.parent_run || !sameList(pt.authorized, t.authorized)) {
      return { status: 'rejected', reason: 'false_inheritance' }
    }
    // a valid successor of a run not in the task without blame is not in it either, and blames no one
    if (p.verdict.status === 'rejected') return { status: 'rejected', reason: p.verdict.reason }
    if (p.verdict.status === 'pending') return { status: 'pending', waitingFor: t.handoff_from.run_id }
    if (p.handoffTo === undefined) {
      // a predecessor that ended handing off to no one never names this run (its sender's call gave up, handoff.md)
      return p.ended === true ? { status: 'rejected', reason: 'not_named_by_predecessor' } : { status: 'pending', waitingFor: t.handoff_from.run_id }
    }
    if (p.handoffTo !== t.run_id) return { status: 'rejected', reason: 'not_named_by_predecessor' }
    return { status: 'admitted', owner: p.verdict.owner }
  }
  if (t.parent_run === null) return { status: 'admitted', owner: t.delegator }
  const parent = lookup(t.parent_run)
  if (parent === undefined) return { status: 'pending', waitingFor: t.parent_run }
  if (blamed(parent) || parent.ticket === undefined) return { status: 'rejected', reason: 'parent_rejected' }
  if (parent.ticket.executor !== t.issuer) return { status: 'rejected', reason: 'not_parent_executor' }
  // a valid sub-delegation of a run not in the task without blame is not in it either, and blames no one
  if (parent.verdict.status === 'rejected') return { status: 'rejected', reason: parent.verdict.reason }
  if (parent.verdict.status === 'pending') return { status: 'pending', waitingFor: t.parent_run }
  return { status: 'admitted', owner: parent.verdict.owner }
}

export interface Admission {
  /** The owner whose task the admitted runs make up (undefined: no run proved a place). */
  owner: string | undefined
  /** Every owner with at least one admitted root (more than one: strangers reused the task id). */
  owners: string[]
  admitted: Set<string>
  /** Runs of the logs that are not the owner's, with why (`foreign_owner` for runs of another owner's task). */
  rejected: Map<string, string>
}

/**
 * Judge every run of a correlation's logs (run_id -> events from seq 1) at
 * once, for `owner`'s task. Without an owner, the owner is the one every
 * admitted root agrees on; when roots of several owners are found the task id
 * is ambiguous and `owner` stays undefined (ask with an owner).
 */
export function admitAll (logs: Map<string, AgentEvent[]>, owner?: string, signatures?: SignatureCache): Admission {
  const standing = new Map<string, RunStanding>()
  const starts = new Map<string, AgentEvent>()
  for (const [runId, events] of logs) {
    const first = events[0]
    if (first === undefined || first.type !== 'run.started') continue
    starts.set(runId, first)
  }
  // a run's verdict depends only on its ancestors: repeat until nothing changes (depth-bounded)
  for (let changed = true, rounds = 0; changed && rounds <= starts.size; rounds++) {
    changed = false
    for (const [runId, started] of starts) {
      const before = standing.get(runId)?.verdict
      if (before !== undefined && before.status !== 'pending') continue
      const verdict = judgeRun(started, id => standing.get(id), signatures)
      if (before === undefined || before.status !== verdict.status) changed = true
      const log = logs.get(runId) ?? []
      standing.set(runId, { ticket: ticketOf(started, undefined, signatures), verdict, handoffTo: handoffTargetOf(log), ended: endsRun(log.at(-1)) })
    }
  }
  const owners = [...new Set([...standing.values()].flatMap(s => s.verdict.status === 'admitted' ? [s.verdict.owner] : []))].sort()
  const chosen = owner ?? (owners.length === 1 ? owners[0] : undefined)
  const admitted = new Set<string>()
  const rejected = new Map<string, string>()
  for (const runId of logs.keys()) {
    const v = standing.get(runId)?.verdict
    if (v === undefined) rejected.set(runId, 'no_run_started')
    else if (v.status === 'admitted' && v.owner === chosen) admitted.add(runId)
    else if (v.status === 'admitted') rejected.set(runId, 'foreign_owner')
    else if (v.status === 'pending') rejected.set(runId, 'missing_ancestor')
    else rejected.set(runId, v.reason)
  }
  return { owner: chosen, owners, admitted, rejected }
}
