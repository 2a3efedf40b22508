/**
 * The records of the signed run log: Run handles and their states, and the
 * AgentEvents that record every transition. The profile's fields come first;
 * the rest is what a mesh needs to route, authorize and audit.
 */
import type { CapabilityRef } from '../card/card.ts'
import type { ErrorCode } from '../errors.ts'

export const RUN_STATES = ['running', 'blocked', 'completed', 'failed'] as const
export type RunState = typeof RUN_STATES[number]
/** No transition leaves these: the run is read-only history. */
export const TERMINAL_STATES: readonly RunState[] = ['completed', 'failed']
/** Paused pending an external decision (a HACP checkpoint). */
export const INTERRUPTED_STATES: readonly RunState[] = ['blocked']

export function isTerminal (state: RunState): boolean {
  return TERMINAL_STATES.includes(state)
}

export interface HandoffLink {
  run_id: string
  agent_id: string
}

/**
 * Why a run failed. Besides the error codes: CANCELED (its delegator canceled
 * it), HANDLER_FAILED (the handler threw or called fail), EXECUTOR_RESTARTED
 * (the node restarted while it executed), HANDOFF_UNCONFIRMED (a handoff
 * successor whose sender never confirmed the handoff), HANDLE_UNDELIVERED (it was created
 * but its handle never reached the caller), EXECUTOR_LOST (its delegator found
 * the executor gone for longer than its liveness bound and declared the run
 * failed, protocols/liveness.md), DELEGATOR_LOST (a blocked run nobody who
 * may resume it could be reached about, src/runs/orphans.ts). See
 * protocols/errors.md.
 */
export const RUN_FAILURE_CODES = ['CANCELED', 'HANDLER_FAILED', 'EXECUTOR_RESTARTED', 'HANDOFF_UNCONFIRMED', 'HANDLE_UNDELIVERED', 'EXECUTOR_LOST', 'DELEGATOR_LOST'] as const

export interface RunFailure {
  code: ErrorCode | typeof RUN_FAILURE_CODES[number]
  message: string
}

export interface Run {
  run_id: string
  /** The executing agent. */
  agent_id: string
  /** Equals the HACP Task.id that started the work (DelegateRequest.task_id). */
  correlation_id: string
  state: RunState
  created_at: string
  updated_at: string
  capability: CapabilityRef
  /** The agent that delegated this run (or, after a handoff, the original delegator). */
  delegator: string
  /** Agents the delegator allows to resume or cancel, besides itself. */
  authorized: string[]
  parent_run: string | null
  /** The run this one continues after a handoff. */
  handoff_from: HandoffLink | null
  /** Set when this run was handed off: it is then terminal. */
  handoff_to: HandoffLink | null
  /** The open checkpoint while blocked, else the last one. */
  checkpoint_id: string | null
  block_reason: string | null
  output: Record<string, unknown> | null
  failure: RunFailure | null
  /** Seq of the last event in this run's log. */
  last_seq: number
  /** The conversation this run is a turn of, when it continues one or was delegated into one (protocols/turns.md). */
  context_id?: string
  /** Its place in that conversation, from 1. */
  turn?: number
  /** The turn before it (null for a first turn). */
  previous_turn?: string | null
}

export const AGENT_EVENT_TYPES = ['run.started', 'run.progress', 'run.blocked', 'run.completed', 'run.failed'] as const
export type AgentEventType = typeof AGENT_EVENT_TYPES[number]

/** The profile's AgentEvent, plus what makes a log of them verifiable. */
export interface AgentEvent {
  run_id: string
  correlation_id: string
  type: AgentEventType
  payload: Record<string, unknown>
  at: string
  /** Position in this run's log, from 1. */
  seq: number
  /** Hex SHA-256 of the previous event of this run (canonical encoding), null for seq 1. */
  prev: string | null
  /** The executing agent, whose key signs the event (unless `declared_by` is set). */
  executor: string
  /**
   * Set only on a liveness verdict (src/runlog/verdict.ts): the run's
   * delegator, who declared the executor lost and whose key signs this
   * run.failed in the executor's place.
   */
  declared_by?: string
  signature: string
}

export type UnsignedEvent = Omit<AgentEvent, 'signature'>
