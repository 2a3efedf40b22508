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
 * command (INVALID_TRANSITION).
 *
 *   command   allowed actors                  from states        to
 *   progress  executor                        running            running
 *   block     executor, delegator, authorized running            blocked (needs checkpoint_id)
 *   resume    delegator, authorized           blocked            running
 *   complete  executor                        running            completed
 *   fail      executor                        running, blocked   failed
 *   cancel    delegator, authorized           running, blocked   failed (code CANCELED)
 *   handoff   executor, delegator, authorized running, blocked   completed (handoff_to set)
 */
import { AapError, InvalidTransitionError, UnauthorizedError } from '../errors.ts'
import { isTerminal, type Actor, type Run, type RunCommand, type TransitionResult } from './types.ts'

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
      return { ok: true, result: { run: next(run, {}, now), event: { type: 'run.progress', payload: command.payload } } }
    }
    case 'block': {
      if (!isExecutor(actor) && actor.role !== 'delegator' && actor.role !== 'authorized') return unauthorized(run, command, actor)
      if (run.state !== 'running') return refuse(run, command, 'only a running run can block')
      if (command.checkpoint_id.length === 0) return refuse(run, command, 'block needs a checkpoint_id')
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
      if (run.state !== 'blocked') return refuse(run, command, 'only a blocked run can resume')
      return {
        ok: true,
        result: {
          run: next(run, { state: 'running', block_reason: null }, now),
          // one logical transition: the checkpoint that blocked the run, resolved by this resolution
          event: { type: 'run.progress', payload: { transition: 'resume', checkpoint_id: run.checkpoint_id, resolution: command.resolution, by } }
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
