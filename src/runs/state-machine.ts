/**
 * The run state machine: one pure function from (run, command, actor, time)
 * to the next run and the event that records it, or a typed refusal. No I/O,
 * no clock, no randomness: the same inputs always give the same answer, which
 * is what makes a run's log replayable.
 *
 *              progress
 *              ┌──────┐
 *              ▼      │      block (executor|delegator)
 *   start ─► running ─┴──────────────────────────────► blocked
 *              │  ▲                                      │
 *              │  └───── resume (delegator|authorized) ──┘
 *              │                                         │
 *   complete / handoff ─► completed        fail / cancel ─► failed
 *
 * completed and failed are terminal: every command on them is INVALID_TRANSITION.
 *
 * Checks run in one order for every command: a terminal run refuses
 * everything (INVALID_TRANSITION); then the actor must be one the command
 * allows (UNAUTHORIZED), except that the executor resuming its own run is
 * INVALID_TRANSITION, as the profile words it; then the state must allow the
 * command (INVALID_TRANSITION; a resume that names a checkpoint the run is not
 * blocked on gets reason checkpoint_mismatch); last, a step that does not end the run must
 * leave room in its log for the end (INVALID_TRANSITION, reason
 * run_log_full): a run has EVENTS_MAX_EVENTS_PER_RUN events at most, since
 * no follower takes more, so progress needs one seq after it, a block two
 * (its resume, then the end).
 *
 *   command   allowed actors                  from states        to
 *   progress  executor                        running            running
 *   block     executor, delegator, authorized running            blocked (needs checkpoint_id)
 *   resume    delegator, authorized           blocked            running
 *   complete  executor                        running            completed
 *   fail      executor                        running, blocked   failed
 *   cancel    delegator, authorized           running, blocked   failed (code CANCELED)
 *   handoff   executor                        running            completed (handoff_to set)
 *             delegator, authorized           running, blocked   completed (handoff_to set)
 *
 * The executor hands off only a running run: a blocked run handed on would
 * go on working elsewhere past a checkpoint nobody resolved (the profile: a
 * blocked run MUST NOT resume itself). Its owners may hand a blocked run on,
 * which leaves the checkpoint unresolved by their own decision.
 *
 * A holder folding a signed event takes the actor from the event's `by`,
 * measured against the run (foldEvent): an event that says the executor, or
 * a stranger, resumed or canceled the run is not a step the run could take;
 * nor is a resume whose grant is not its resumer's signature. An executor's
 * handoff of its blocked run is one it may not take, but it ended the run:
 * the holder follows it to the successor (the audit replay marks it).
 */
import { EVENTS_MAX_EVENTS_PER_RUN } from '../constants.ts'
import { AapError, InvalidTransitionError, UnauthorizedError } from '../errors.ts'
import { isTerminal, type AgentEvent, type HandoffLink, type Run, type RunFailure } from '../runlog/types.ts'
import { grantStanding } from '../runlog/resume-grant.ts'
import type { Actor, RunCommand, TransitionResult } from './types.ts'

export type TransitionOutcome =
  | { ok: true, result: TransitionResult }
  | { ok: false, error: AapError }

function refuse (run: Run, command: RunCommand, why: string): TransitionOutcome {
  return {
    ok: false,
    error: new InvalidTransitionError(`cannot ${command.type} run ${run.run_id} in state ${run.state}: ${why}`, {
      run_id: run.run_id, state: run.state, command: command.type
    })
  }
}

/** Seqs a step that does not end the run must leave after its own, for what must still be able to follow it. */
const ROOM_AFTER: Partial<Record<RunCommand['type'], number>> = { progress: 1, resume: 1, block: 2 }

/** INVALID_TRANSITION (run_log_full) when the run's log has no room for the command and what must follow it. */
function logFull (run: Run, command: RunCommand): TransitionOutcome | undefined {
  const after = ROOM_AFTER[command.type]
  if (after === undefined || run.last_seq + 1 + after <= EVENTS_MAX_EVENTS_PER_RUN) return undefined
  return {
    ok: false,
    error: new InvalidTransitionError(`cannot ${command.type} run ${run.run_id}: its log holds ${run.last_seq} of at most ${EVENTS_MAX_EVENTS_PER_RUN} events, and the rest is kept for its end`, {
      run_id: run.run_id, state: run.state, command: command.type, reason: 'run_log_full', max: EVENTS_MAX_EVENTS_PER_RUN
    })
  }
}

/**
 * INVALID_TRANSITION (checkpoint_mismatch): the resume answers a checkpoint the
 * run is not blocked on. Only the run's owners get here, and they may read the
 * run anyway, so the open checkpoint (null when none is) is named for them.
 */
export function checkpointMismatchError (run: Run, answered: string): InvalidTransitionError {
  const open = run.state === 'blocked' ? run.checkpoint_id : null
  return new InvalidTransitionError(`cannot resume run ${run.run_id} with an answer to checkpoint ${answered}: ${open === null ? `it is ${run.state}, blocked on no checkpoint` : `it is blocked on checkpoint ${open}`}`, {
    run_id: run.run_id, state: run.state, command: 'resume', reason: 'checkpoint_mismatch', checkpoint_id: answered, open_checkpoint_id: open
  })
}

function checkpointMismatch (run: Run, answered: string): TransitionOutcome {
  return { ok: false, error: checkpointMismatchError(run, answered) }
}

function unauthorized (run: Run, command: RunCommand, actor: Actor): TransitionOutcome {
  return {
    ok: false,
    error: new UnauthorizedError(`${actor.role === 'executor' ? 'the executor' : actor.agent_id} may not ${command.type} run ${run.run_id}`, {
      run_id: run.run_id, command: command.type
    })
  }
}

const isExecutor = (a: Actor): boolean => a.role === 'executor'
const isOwner = (a: Actor): boolean => a.role === 'delegator' || a.role === 'authorized'

function next (run: Run, patch: Partial<Run>, now: string): Run {
  return { ...run, ...patch, updated_at: now }
}

export function transition (run: Run, command: RunCommand, actor: Actor, now: string): TransitionOutcome {
  if (isTerminal(run.state)) return refuse(run, command, 'the run is terminal and read-only')
  const by = actor.role === 'executor' ? run.agent_id : actor.agent_id

  switch (command.type) {
    case 'progress': {
      if (!isExecutor(actor)) return unauthorized(run, command, actor)
      if (run.state !== 'running') return refuse(run, command, 'only a running run reports progress')
      const full = logFull(run, command)
      if (full !== undefined) return full
      return { ok: true, result: { run: next(run, {}, now), event: { type: 'run.progress', payload: command.payload } } }
    }
    case 'block': {
      if (!isExecutor(actor) && actor.role !== 'delegator' && actor.role !== 'authorized') return unauthorized(run, command, actor)
      if (run.state !== 'running') return refuse(run, command, 'only a running run can block')
      if (command.checkpoint_id.length === 0) return refuse(run, command, 'block needs a checkpoint_id')
      // a run handed back to its delegator: its delegator is its executor, which may not resume it (nor may it as
      // an authorized agent: the run's executor is never anything else to it)
      if (run.delegator === run.agent_id && run.authorized.every(a => a === run.agent_id)) {
        return refuse(run, command, 'nobody could resume it: its delegator is its executor, and it names no authorized agent')
      }
      const full = logFull(run, command)
      if (full !== undefined) return full
      return {
        ok: true,
        result: {
          run: next(run, { state: 'blocked', checkpoint_id: command.checkpoint_id, block_reason: command.reason }, now),
          event: { type: 'run.blocked', payload: { checkpoint_id: command.checkpoint_id, reason: command.reason, by } }
        }
      }
    }
    case 'resume': {
      // the profile: a blocked run MUST NOT resume itself (a transition error, not a matter of rights)
      if (isExecutor(actor)) return refuse(run, command, 'a blocked run must not resume itself; its delegator resumes it')
      if (!isOwner(actor)) return unauthorized(run, command, actor)
      // a resume that names its checkpoint resolves that one only: a late or retried answer to an earlier
      // checkpoint must not resolve the one the run blocked on since (nor find a running run)
      if (command.checkpoint_id !== undefined && (run.state !== 'blocked' || command.checkpoint_id !== run.checkpoint_id)) return checkpointMismatch(run, command.checkpoint_id)
      if (run.state !== 'blocked') return refuse(run, command, 'only a blocked run can resume')
      const full = logFull(run, command)
      if (full !== undefined) return full
      return {
        ok: true,
        result: {
          run: next(run, { state: 'running', block_reason: null }, now),
          // one logical transition: the checkpoint that blocked the run, resolved by this resolution
          // with the resumer's signature over what it answered, when it sent one (resume-grant.ts)
          event: { type: 'run.progress', payload: { transition: 'resume', checkpoint_id: run.checkpoint_id, resolution: command.resolution, by, ...(command.grant === undefined ? {} : { grant: command.grant }) } }
        }
      }
    }
    case 'complete': {
      if (!isExecutor(actor)) return unauthorized(run, command, actor)
      if (run.state !== 'running') return refuse(run, command, 'only a running run completes')
      return {
        ok: true,
        result: { run: next(run, { state: 'completed', output: command.output }, now), event: { type: 'run.completed', payload: { output: command.output } } }
      }
    }
    case 'fail': {
      if (!isExecutor(actor)) return unauthorized(run, command, actor)
      const failure = { code: command.code, message: command.message }
      return {
        ok: true,
        result: { run: next(run, { state: 'failed', failure }, now), event: { type: 'run.failed', payload: { failure } } }
      }
    }
    case 'cancel': {
      if (!isOwner(actor)) return unauthorized(run, command, actor)
      const failure = { code: 'CANCELED' as const, message: command.reason }
      return {
        ok: true,
        result: { run: next(run, { state: 'failed', failure }, now), event: { type: 'run.failed', payload: { failure, reason: 'canceled', by } } }
      }
    }
    case 'handoff': {
      if (!isExecutor(actor) && !isOwner(actor)) return unauthorized(run, command, actor)
      if (isExecutor(actor) && run.state !== 'running') return refuse(run, command, 'a blocked run must not go on elsewhere before it is resumed; its executor hands it off once it runs again')
      return {
        ok: true,
        result: {
          run: next(run, { state: 'completed', handoff_to: command.to, output: null }, now),
          event: { type: 'run.completed', payload: { transition: 'handoff', handoff_to: command.to, by } }
        }
      }
    }
  }
}

// ---- the other direction: from a signed event back to the transition it records ----------

function isRecord (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function str (v: unknown): string {
  return typeof v === 'string' ? v : ''
}

/**
 * The command (and the kind of actor) an executor's event records, so a
 * holder of the events (the delegator) derives its view of the run with the
 * same `transition` that made them. Undefined for run.started (not a
 * transition) and for payloads that do not say what happened.
 */
export function commandOf (e: AgentEvent): { command: RunCommand, actor: Actor } | undefined {
  const p = e.payload
  const executor: Actor = { role: 'executor' }
  const owner: Actor = { role: 'delegator', agent_id: str(p.by) }
  switch (e.type) {
    case 'run.started':
      return undefined
    case 'run.progress':
      if (p.transition === 'resume') return { command: { type: 'resume', resolution: isRecord(p.resolution) ? p.resolution : {} }, actor: owner }
      return { command: { type: 'progress', payload: p }, actor: executor }
    case 'run.blocked':
      return { command: { type: 'block', reason: str(p.reason), checkpoint_id: str(p.checkpoint_id) }, actor: executor }
    case 'run.completed': {
      if (p.transition === 'handoff') {
        const to = p.handoff_to
        if (!isRecord(to) || typeof to.run_id !== 'string' || typeof to.agent_id !== 'string') return undefined
        const link: HandoffLink = { run_id: to.run_id, agent_id: to.agent_id }
        return { command: { type: 'handoff', to: link }, actor: executor }
      }
      return { command: { type: 'complete', output: isRecord(p.output) ? p.output : {} }, actor: executor }
    }
    case 'run.failed': {
      const f = isRecord(p.failure) ? p.failure : {}
      if (p.reason === 'canceled') return { command: { type: 'cancel', reason: str(f.message) }, actor: owner }
      return { command: { type: 'fail', code: str(f.code) as RunFailure['code'], message: str(f.message) }, actor: executor }
    }
  }
}

/**
 * A holder's view of a run moved by one more of its verified events. Events
 * at or below the view's `last_seq` change nothing; an event the view cannot
 * take (it missed one in between) leaves it as it was, for the next get_run
 * answer to correct.
 */
export function foldEvent (run: Run, e: AgentEvent): Run {
  if (e.run_id !== run.run_id || e.seq <= run.last_seq) return run
  const step = commandOf(e)
  if (step === undefined) return { ...run, last_seq: e.seq }
  // a resolution whose grant is not its resumer's signature is no resume the run took
  if (step.command.type === 'resume' && grantStanding(e) === 'forged') return run
  const actor = actorIn(run, e, step.command, step.actor)
  // an executor that handed its blocked run on (nodes before this rule did) still ended it, and the run goes on in
  // the successor: a holder follows it there rather than wait on a run that will never move (the audit replay marks
  // the step, handoff_while_blocked)
  const from = step.command.type === 'handoff' && actor.role === 'executor' && run.state === 'blocked' ? { ...run, state: 'running' as const } : run
  const outcome = transition(from, step.command, actor, e.at)
  if (!outcome.ok) return run
  return { ...outcome.result.run, last_seq: e.seq }
}

/**
 * Whether two views of one run id continue the same run: a run's lineage
 * (the run it was handed off from, or none) is fixed when it is created, so
 * views that differ are not of the same run (one kept from a forged link).
 */
export function sameLineage (a: Run, b: Run): boolean {
  return (a.handoff_from?.run_id ?? null) === (b.handoff_from?.run_id ?? null)
}

/**
 * Who an event says took its step, as the run knows them: the agent its
 * payload names (`by`) is the run's executor, its delegator, an agent it
 * authorized, or a stranger. The executor signs every event of its run, so
 * `by` is its word; measured against the run, a log in which the executor
 * (or anyone the run does not name) resumed or canceled the run does not
 * fold, nor does a resume whose grant is not its resumer's signature
 * (resume-grant.ts). An executor's handoff of its blocked run folds: the
 * run ended, and goes on in the successor the holder must follow. Events
 * without `by`, and failures, keep the actor their type implies.
 */
function actorIn (run: Run, e: AgentEvent, command: RunCommand, implied: Actor): Actor {
  const by = e.payload.by
  // a failure is the executor's step, or a delegator's liveness verdict (its own signature, checked elsewhere)
  if (typeof by !== 'string' || command.type === 'fail') return implied
  if (by === run.agent_id) return { role: 'executor' }
  if (by === run.delegator) return { role: 'delegator', agent_id: by }
  if (run.authorized.includes(by)) return { role: 'authorized', agent_id: by }
  return { role: 'other', agent_id: by }
}
