/**
 * The run service's shapes: who asks (Actor), what is asked (RunCommand),
 * what a transition produces, and what an agent's handler sees. The records
 * themselves (Run, AgentEvent) are in src/runlog/types.ts.
 */
import type { ArtifactSource, FilePart } from '../artifacts/types.ts'
import type { CapabilityRef } from '../card/card.ts'
import type { AgentEvent, AgentEventType, HandoffLink, Run, RunFailure, RunState } from '../runlog/types.ts'
import type { ResumeGrant } from '../runlog/resume-grant.ts'
import type { CallOptions } from '../wire/rpc.ts'
import type { TraceContext } from './trace.ts'

/** Who is asking, as the node established it (Noise-authenticated PeerId or local caller). */
export type Actor =
  | { role: 'executor' }
  | { role: 'delegator', agent_id: string }
  | { role: 'authorized', agent_id: string }
  | { role: 'other', agent_id: string }

export type RunCommand =
  | { type: 'progress', payload: Record<string, unknown> }
  | { type: 'block', reason: string, checkpoint_id: string }
  /** `checkpoint_id`: the checkpoint the resolution answers; absent, whichever is open. */
  | { type: 'resume', resolution: Record<string, unknown>, checkpoint_id?: string, grant?: ResumeGrant }
  | { type: 'complete', output: Record<string, unknown> }
  | { type: 'fail', code: RunFailure['code'], message: string }
  | { type: 'cancel', reason: string }
  | { type: 'handoff', to: HandoffLink, context_digest?: string }

/**
 * A resume's call options. `checkpointId` names the checkpoint the resolution
 * answers: the run's executor refuses the resume (INVALID_TRANSITION, reason
 * `checkpoint_mismatch`) unless the run is blocked on it, so a late or retried
 * resume never resolves a later checkpoint. Without it the resume resolves the
 * open checkpoint, whichever it is.
 */
export type ResumeOptions = CallOptions & { checkpointId?: string }

/** What a transition produces: the next run and the event that records it (unsigned, unsequenced). */
export interface TransitionResult {
  run: Run
  event: { type: AgentEventType, payload: Record<string, unknown> }
}

// ---- the caller's and the agent's side of the run service -------------------------------

export interface DelegateRequest {
  to_agent: string
  task_id: string
  capability: CapabilityRef
  input: Record<string, unknown>
  parent_run?: string | null
  /** Retries with the same key return the same run. */
  idempotency_key?: string
  /** Agents allowed to resume or cancel besides the delegator. */
  authorized?: string[]
  /** Start the next turn of the conversation this earlier run of the same agent is a turn of (protocols/turns.md). */
  continue_run?: string
  /** Continue this conversation with the agent (its latest turn), or start one under this id. */
  context_id?: string
  /** W3C trace context to continue (default: the active OpenTelemetry span, else the parent run's; see trace.ts). */
  trace?: TraceContext
}

/** An earlier turn of a conversation, as the handler of a later one sees it. */
export interface TurnView {
  run_id: string
  turn: number
  input: Record<string, unknown>
  state: RunState
  output: Record<string, unknown> | null
  failure: RunFailure | null
}

/** The conversation a run is a turn of: every run is one, a first turn of its own unless it continues another. */
export interface Conversation {
  context_id: string
  /** This run's turn, from 1. */
  turn: number
  previous_turn: string | null
  /** The earlier turns, oldest first (empty for a first turn). */
  turns: TurnView[]
  /** What the agent saved with saveContext in an earlier turn (or this one), null until then. */
  saved: Record<string, unknown> | null
}

/** A checkpoint a run is blocked on, as its run.blocked event recorded it. */
export interface OpenCheckpoint {
  checkpoint_id: string
  reason: string
  /** Who raised it: the executing agent's id (its own `ctx.block`), the delegator's, or an authorized agent's. */
  by: string
}

/** A checkpoint resolved by a resume, as its event recorded it. */
export interface ResolvedCheckpoint {
  checkpoint_id: string | null
  resolution: Record<string, unknown>
  /** The delegator or authorized agent that resumed the run. */
  by: string
}

/**
 * What an in-process handler sees of its run.
 *
 * Blocks raised by someone else (the delegator, or an agent it authorized,
 * which is how an L2 `checkpoint.raise` reaches a run) are told at once:
 * `blocked` turns non-null, `onBlocked` listeners are called, and
 * `untilResumed()` waits for the resolution. The handler is never started a
 * second time for the same run while it is alive, and what it does while the
 * run is blocked is kept, not lost:
 *
 * - returning (or `complete`) while blocked: the output is held and the run
 *   completes with it right after the resume; if the run is canceled (or
 *   otherwise ends) meanwhile, the output is dropped and the run stays as it
 *   ended;
 * - `progress` and `block` while blocked wait for the resume, then go through;
 * - throwing or `fail` while blocked fails the run at once (fail is allowed
 *   from blocked).
 *
 * Only a run that was blocked when the node restarted (no handler alive in
 * this process) has its handler started again on resume, with `restored` set.
 * A handler that returned while blocked and whose node then stopped before
 * the resume is in that case too: its held output was in memory only.
 */
export interface RunContext {
  /** A snapshot of the run when the handler was called. */
  readonly run: Run
  readonly input: Record<string, unknown>
  /** Aborted when the run ends by other means (cancel, handoff, node stop). */
  readonly signal: AbortSignal
  /** Set when this run continues another one after a handoff. */
  readonly handedOff: { from: HandoffLink, context: Record<string, unknown> } | null
  /** Set when the handler is called again for a run that was blocked when the node restarted. */
  readonly restored: { checkpoint_id: string | null, resolution: Record<string, unknown> } | null
  /** The checkpoint the run is blocked on now (by anyone, the handler's own `block` included), or null while it runs. Live. */
  readonly blocked: OpenCheckpoint | null
  /** Called once the run is blocked (after the block is committed). Returns the unsubscribe. */
  onBlocked: (listener: (checkpoint: OpenCheckpoint) => void) => () => void
  /** Called once a blocked run is resumed (after the resume is committed). Returns the unsubscribe. */
  onResumed: (listener: (resolved: ResolvedCheckpoint) => void) => () => void
  /** Null at once when the run is not blocked; else resolves at its resume; rejects (with `signal.reason`) if the run ends first. */
  untilResumed: () => Promise<ResolvedCheckpoint | null>
  progress: (payload: Record<string, unknown>) => Promise<void>
  /** Block on a checkpoint; resolves with the resolution the delegator resumes with. */
  block: (reason: string, checkpointId: string) => Promise<Record<string, unknown>>
  complete: (output: Record<string, unknown>) => Promise<void>
  fail: (message: string) => Promise<void>
  handoff: (toAgent: string, context: Record<string, unknown>) => Promise<Run>
  /** The conversation this run is a turn of: earlier turns and the saved context, loaded before the handler starts. */
  readonly conversation: Conversation
  /** Save the agent's context of the conversation (a JSON object up to CONTEXT_STATE_MAX_BYTES), durably, for its next turns. */
  saveContext: (context: Record<string, unknown>) => Promise<void>
  /**
   * Store bytes (or a stream of them, read as it comes) as an artifact and
   * get the FilePart that names it, to put in a progress payload or the
   * output: the signed events carry the reference, never the bytes.
   */
  artifact: (source: ArtifactSource, opts: { media_type: string, name?: string }) => Promise<FilePart>
}

/** Returns the output (completes the run) or nothing (completes with {}); throwing fails the run. */
export type RunHandler = (ctx: RunContext) => Promise<Record<string, unknown> | undefined | void>

/** Decide whether to accept a delegation; return a reason string to refuse. */
export type DelegationPolicy = (req: {
  from: string
  task_id: string
  capability: CapabilityRef
  input: Record<string, unknown>
  /** Aborted when the caller goes away or the request overruns its time. */
  signal: AbortSignal
}) => string | undefined | Promise<string | undefined>

export type RunEventListener = (event: AgentEvent, run: Run) => void
