/**
 * Audit replay of a correlation: from verified per-run logs to the whole
 * lifecycle of a task across its runs. Pure functions, no I/O: the same logs
 * always give the same replay.
 *
 * Runs are ordered by lineage, not by clock: a run comes after the run that
 * handed off to it or delegated it (parent_run), siblings by their start
 * time, then id. Within a run, events go by seq. Each event maps to one
 * logical transition; a block carries its checkpoint_id, the resume that
 * ends it names the same checkpoint and carries the resolution, and a
 * handoff (the old run's handoff completion plus the new run's start) is one
 * transition.
 */
import type { CapabilityRef } from '../card/card.ts'
import { handoffTarget } from '../runlog/handoff.ts'
import { grantStanding } from '../runlog/resume-grant.ts'
import type { AgentEvent, HandoffLink, RunState } from '../runlog/types.ts'
import type { RunFork } from './forks.ts'

export type Transition =
  | { kind: 'delegate', run_id: string, by: string | null, to: string, capability: CapabilityRef | null, parent_run: string | null, seq: number, at: string }
  | { kind: 'progress', run_id: string, payload: Record<string, unknown>, seq: number, at: string }
  | { kind: 'block', run_id: string, checkpoint_id: string | null, reason: string | null, by: string | null, seq: number, at: string }
  | { kind: 'resume', run_id: string, checkpoint_id: string | null, resolution: Record<string, unknown>, by: string | null, blocked_seq: number | null, seq: number, at: string, attested: boolean, violation?: StepViolation }
  | { kind: 'handoff', run_id: string, from: HandoffLink, to: HandoffLink, by: string | null, seq: number, at: string, violation?: StepViolation }
  | { kind: 'complete', run_id: string, output: Record<string, unknown> | null, seq: number, at: string }
  | { kind: 'fail', run_id: string, failure: Record<string, unknown> | null, seq: number, at: string }

/**
 * A step its executor's log records that the run could not take (the
 * state machine refuses it): the executor signs every event of its run, so
 * its log can say anything, and the audit says where it broke the rules. A
 * checkpoint a violating resume names stays unresolved.
 * - self_resume: the blocked run resumed itself (by its executor);
 * - resume_not_by_owner: resumed by an agent that neither delegated the run
 *   nor was authorized by its delegator;
 * - forged_grant: the resume carries a grant that is not its resumer's
 *   signature over what it answered (runlog/resume-grant.ts);
 * - reused_grant: its grant is one an earlier resume of the run carried: a
 *   grant answers one block, and a copy answers nothing (the executor could
 *   otherwise resolve a later checkpoint with an answer given to an earlier
 *   one);
 * - handoff_while_blocked: its executor handed it on while it was blocked,
 *   so the work went on elsewhere past an unresolved checkpoint.
 */
export type StepViolation = 'self_resume' | 'resume_not_by_owner' | 'forged_grant' | 'reused_grant' | 'handoff_while_blocked'

/** The agents that may resume a run: its delegator and those it authorized, as its signed run.started names them. */
function ownersOf (started: AgentEvent | undefined): Set<string> | undefined {
  if (started?.type !== 'run.started') return undefined
  const delegator = str(started.payload.delegator)
  if (delegator === null) return undefined
  const authorized = rec(started.payload.ticket)?.authorized
  return new Set([delegator, ...(Array.isArray(authorized) ? authorized.filter((a): a is string => typeof a === 'string') : [])])
}

/** Whether a resume `by` this agent breaks the rules of a run executed by `executor` (undefined: it does not). */
function resumeViolation (by: string | null, executor: string, owners: Set<string> | undefined): StepViolation | undefined {
  if (by === executor) return 'self_resume'
  if (owners !== undefined && (by === null || !owners.has(by))) return 'resume_not_by_owner'
  return undefined
}

/** A checkpoint seen from both sides: the block that raised it and the resume that resolved it. */
export interface CheckpointRecord {
  run_id: string
  checkpoint_id: string | null
  reason: string | null
  blocked_seq: number
  blocked_at: string
  blocked_by: string | null
  /** null while the run is still blocked on it (or ended without a resume). */
  resumed_seq: number | null
  resumed_at: string | null
  resolved_by: string | null
  resolution: Record<string, unknown> | null
  /**
   * Whether the resolution is the resumer's own signed word (its grant,
   * runlog/resume-grant.ts), not only the executor's: false for a resume
   * from a node or to an executor from before grants; null while unresolved.
   */
  attested: boolean | null
}

export interface ReplayRun {
  run_id: string
  executor: string
  delegator: string | null
  capability: CapabilityRef | null
  parent_run: string | null
  handoff_from: HandoffLink | null
  handoff_to: HandoffLink | null
  /** How the run began. */
  started_by: 'delegate' | 'handoff'
  /** Lineage depth: 0 for a root, +1 per handoff or sub-delegation. */
  depth: number
  /** Set when the run names a predecessor or parent this replay does not hold. */
  orphan: boolean
  /** The conversation the run is a turn of at its executor (its own run id for a first turn delegated without one; protocols/turns.md). */
  context_id: string
  turn: number
  previous_turn: string | null
  /** State after its last event. */
  state: RunState
  /** True when the log ends in a terminal event. */
  complete: boolean
  events: AgentEvent[]
}

export interface CorrelationReplay {
  correlation_id: string
  /** The agent whose task this is (the root delegator); null when no run proved a place. */
  owner: string | null
  /** Runs held under the correlation id that are not the owner's task, with why (protocols/lineage.md). */
  rejected_runs: Array<{ run_id: string, reason: string }>
  /**
   * Participants this replay asked and that did not answer (their last ask
   * failed with `code`): what only they hold may be missing from it.
   */
  unreached: Array<{ agent_id: string, code: string }>
  /**
   * Runs of the correlation whose executor signed two events at one seq, with
   * both events: the proof of the fork (forks.ts). Their successors are ended.
   */
  forks: RunFork[]
  runs: ReplayRun[]
  /** Conversations with more than one turn here: their turns in order (protocols/turns.md). */
  contexts: Array<{ context_id: string, executor: string, delegator: string | null, turns: string[] }>
  /** Every event of every run, runs in lineage order, each run by seq. */
  events: AgentEvent[]
  transitions: Transition[]
  checkpoints: CheckpointRecord[]
}

// ---- payload readers: the payloads are executor-signed but free-form ------------------

function rec (v: unknown): Record<string, unknown> | null {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? v as Record<string, unknown> : null
}

function str (v: unknown): string | null {
  return typeof v === 'string' ? v : null
}

function link (v: unknown): HandoffLink | null {
  const r = rec(v)
  const runId = str(r?.run_id)
  const agentId = str(r?.agent_id)
  return runId !== null && agentId !== null ? { run_id: runId, agent_id: agentId } : null
}

function capability (v: unknown): CapabilityRef | null {
  const r = rec(v)
  const id = str(r?.capability_id)
  const version = str(r?.version)
  return id !== null && version !== null ? { capability_id: id, version } : null
}

export function isResumeEvent (e: AgentEvent): boolean {
  return e.type === 'run.progress' && e.payload.transition === 'resume'
}

/** The state a run is in after `e`. */
export function stateAfter (e: AgentEvent): RunState {
  switch (e.type) {
    case 'run.started': return 'running'
    case 'run.progress': return 'running'
    case 'run.blocked': return 'blocked'
    case 'run.completed': return 'completed'
    case 'run.failed': return 'failed'
  }
}

/** Agents an event names as taking part: delegator, whoever handed off, the handoff target. */
export function participantsOf (e: AgentEvent): string[] {
  const out = new Set<string>([e.executor])
  if (e.type === 'run.started') {
    for (const k of ['delegator', 'handoff_by']) {
      const v = str(e.payload[k])
      if (v !== null) out.add(v)
    }
    const from = link(e.payload.handoff_from)
    if (from !== null) out.add(from.agent_id)
  }
  const to = handoffTarget(e)
  if (to !== null) out.add(to.agent_id)
  return [...out]
}

/** Runs an event links to: the predecessor or parent named by a start, the target of a handoff. */
export function linkedRunsOf (e: AgentEvent): HandoffLink[] {
  const out: HandoffLink[] = []
  if (e.type === 'run.started') {
    const from = link(e.payload.handoff_from)
    if (from !== null) out.push(from)
  }
  const to = handoffTarget(e)
  if (to !== null) out.push(to)
  return out
}

// ---- the replay ----------------------------------------------------------------------

function describeRun (runId: string, events: AgentEvent[]): Omit<ReplayRun, 'depth' | 'orphan'> {
  const first = events[0]
  const last = events.at(-1)
  const p = first?.type === 'run.started' ? first.payload : {}
  const handoffFrom = link(p.handoff_from)
  let handoffTo: HandoffLink | null = null
  for (const e of events) handoffTo = handoffTarget(e) ?? handoffTo
  const state = last === undefined ? 'running' : stateAfter(last)
  const turn = rec(p.turn)
  return {
    context_id: str(turn?.context_id) ?? runId,
    turn: typeof turn?.turn === 'number' ? turn.turn : 1,
    previous_turn: str(turn?.previous_turn),
    run_id: runId,
    executor: first?.executor ?? '',
    delegator: str(p.delegator),
    capability: capability(p.capability),
    parent_run: str(p.parent_run),
    handoff_from: handoffFrom,
    handoff_to: handoffTo,
    started_by: handoffFrom === null ? 'delegate' : 'handoff',
    state,
    complete: state === 'completed' || state === 'failed',
    events
  }
}

/** Lineage order: roots by start time, each followed depth-first by the runs it led to. */
function orderRuns (runs: Map<string, Omit<ReplayRun, 'depth' | 'orphan'>>): ReplayRun[] {
  const startedAt = (r: Omit<ReplayRun, 'depth' | 'orphan'>): string => r.events[0]?.at ?? ''
  const byStart = (a: Omit<ReplayRun, 'depth' | 'orphan'>, b: Omit<ReplayRun, 'depth' | 'orphan'>): number =>
    startedAt(a) < startedAt(b) ? -1 : startedAt(a) > startedAt(b) ? 1 : a.run_id < b.run_id ? -1 : a.run_id > b.run_id ? 1 : 0
  const parentOf = (r: Omit<ReplayRun, 'depth' | 'orphan'>): string | null => r.handoff_from?.run_id ?? r.parent_run
  const children = new Map<string, Array<Omit<ReplayRun, 'depth' | 'orphan'>>>()
  const roots: Array<Omit<ReplayRun, 'depth' | 'orphan'>> = []
  for (const r of runs.values()) {
    const parent = parentOf(r)
    if (parent !== null && parent !== r.run_id && runs.has(parent)) {
      const list = children.get(parent) ?? []
      list.push(r)
      children.set(parent, list)
    } else {
      roots.push(r)
    }
  }
  const out: ReplayRun[] = []
  const seen = new Set<string>()
  const visit = (r: Omit<ReplayRun, 'depth' | 'orphan'>, depth: number, orphan: boolean): void => {
    if (seen.has(r.run_id)) return
    seen.add(r.run_id)
    out.push({ ...r, depth, orphan })
    for (const c of (children.get(r.run_id) ?? []).sort(byStart)) visit(c, depth + 1, false)
  }
  for (const r of roots.sort(byStart)) visit(r, 0, parentOf(r) !== null)
  // runs caught in a lineage cycle (only a lying executor makes one) come last, flagged
  for (const r of [...runs.values()].sort(byStart)) visit(r, 0, true)
  return out
}

/**
 * Build the replay of one correlation from its verified logs (run_id ->
 * events from seq 1, ascending).
 */
export function buildReplay (
  correlationId: string, logs: Map<string, AgentEvent[]>,
  lineage: { owner: string | null, rejected: Map<string, string>, unreached?: Array<{ agent_id: string, code: string }>, forks?: RunFork[] } = { owner: null, rejected: new Map() }
): CorrelationReplay {
  const described = new Map<string, Omit<ReplayRun, 'depth' | 'orphan'>>()
  for (const [runId, events] of logs) {
    if (events.length > 0) described.set(runId, describeRun(runId, events))
  }
  const runs = orderRuns(described)
  const events: AgentEvent[] = []
  const transitions: Transition[] = []
  const checkpoints: CheckpointRecord[] = []
  // a handoff is logged twice (old run completes, new run starts): record it once
  const handoffsSeen = new Set<string>()
  const handoffKey = (from: string, to: string): string => `${from}\n${to}`

  for (const run of runs) {
    let open: CheckpointRecord | undefined
    const owners = ownersOf(run.events[0])
    const grantsSeen = new Set<string>()
    for (const e of run.events) {
      events.push(e)
      const p = e.payload
      const base = { run_id: e.run_id, seq: e.seq, at: e.at }
      switch (e.type) {
        case 'run.started': {
          const from = link(p.handoff_from)
          if (from === null) {
            transitions.push({ kind: 'delegate', ...base, by: str(p.delegator), to: e.executor, capability: capability(p.capability), parent_run: str(p.parent_run) })
          } else if (!handoffsSeen.has(handoffKey(from.run_id, e.run_id))) {
            handoffsSeen.add(handoffKey(from.run_id, e.run_id))
            transitions.push({ kind: 'handoff', ...base, from, to: { run_id: e.run_id, agent_id: e.executor }, by: str(p.handoff_by) })
          }
          break
        }
        case 'run.blocked': {
          open = {
            run_id: e.run_id,
            checkpoint_id: str(p.checkpoint_id),
            reason: str(p.reason),
            blocked_seq: e.seq,
            blocked_at: e.at,
            blocked_by: str(p.by),
            resumed_seq: null,
            resumed_at: null,
            resolved_by: null,
            resolution: null,
            attested: null
          }
          checkpoints.push(open)
          transitions.push({ kind: 'block', ...base, checkpoint_id: open.checkpoint_id, reason: open.reason, by: open.blocked_by })
          break
        }
        case 'run.progress': {
          if (isResumeEvent(e)) {
            const resolution = rec(p.resolution) ?? {}
            const checkpointId = str(p.checkpoint_id)
            const blocked = open !== undefined && open.checkpoint_id === checkpointId ? open : undefined
            const standing = grantStanding(e)
            const signature = str(rec(p.grant)?.signature)
            const reused = standing === 'attested' && signature !== null && grantsSeen.has(signature)
            if (signature !== null) grantsSeen.add(signature)
            const violation = resumeViolation(str(p.by), e.executor, owners) ?? (standing === 'forged' ? 'forged_grant' : reused ? 'reused_grant' : undefined)
            // a resume the run could not take resolves nothing: the checkpoint stays as the block left it
            if (blocked !== undefined && violation === undefined) {
              blocked.resumed_seq = e.seq
              blocked.resumed_at = e.at
              blocked.resolved_by = str(p.by)
              blocked.resolution = resolution
              blocked.attested = standing === 'attested'
            }
            // by the rules the run is still blocked after a resume it could not take
            if (violation === undefined) open = undefined
            transitions.push({ kind: 'resume', ...base, checkpoint_id: checkpointId, resolution, by: str(p.by), blocked_seq: blocked?.blocked_seq ?? null, attested: standing === 'attested' && !reused, ...(violation === undefined ? {} : { violation }) })
          } else {
            transitions.push({ kind: 'progress', ...base, payload: p })
          }
          break
        }
        case 'run.completed': {
          const to = handoffTarget(e)
          if (to === null) {
            transitions.push({ kind: 'complete', ...base, output: rec(p.output) })
          } else if (!handoffsSeen.has(handoffKey(e.run_id, to.run_id))) {
            handoffsSeen.add(handoffKey(e.run_id, to.run_id))
            // its owners may hand a blocked run on (leaving the checkpoint open by their own decision); its executor may not
            const violation = open !== undefined && str(p.by) === e.executor ? { violation: 'handoff_while_blocked' as const } : {}
            transitions.push({ kind: 'handoff', ...base, from: { run_id: e.run_id, agent_id: e.executor }, to, by: str(p.by), ...violation })
          }
          break
        }
        case 'run.failed': {
          transitions.push({ kind: 'fail', ...base, failure: rec(p.failure) })
          break
        }
      }
    }
  }
  const rejected = [...lineage.rejected].map(([runId, reason]) => ({ run_id: runId, reason })).sort((a, b) => a.run_id < b.run_id ? -1 : 1)
  return { correlation_id: correlationId, owner: lineage.owner, rejected_runs: rejected, unreached: lineage.unreached ?? [], forks: lineage.forks ?? [], runs, contexts: contextsOf(runs), events, transitions, checkpoints }
}

/**
 * Conversations of more than one turn among `runs`, turns in order. A context is one executor's with one
 * delegator (the executor keys them so, src/runs/contexts.ts): two delegators' conversations of the same
 * context id at one executor are two.
 */
function contextsOf (runs: ReplayRun[]): CorrelationReplay['contexts'] {
  const groups = new Map<string, ReplayRun[]>()
  for (const r of runs) {
    const key = `${r.executor}\n${r.delegator ?? ''}\n${r.context_id}`
    groups.set(key, [...(groups.get(key) ?? []), r])
  }
  const out: CorrelationReplay['contexts'] = []
  for (const list of groups.values()) {
    if (list.length < 2) continue
    list.sort((a, b) => a.turn - b.turn)
    out.push({ context_id: list[0]?.context_id ?? '', executor: list[0]?.executor ?? '', delegator: list[0]?.delegator ?? null, turns: list.map(r => r.run_id) })
  }
  const key = (c: CorrelationReplay['contexts'][number]): string => `${c.context_id}\n${c.delegator ?? ''}\n${c.executor}`
  return out.sort((a, b) => key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0)
}
