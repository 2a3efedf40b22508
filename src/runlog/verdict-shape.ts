/**
 * The shape of a liveness verdict (verdict.ts), apart so that event
 * verification can check it without the signing side.
 */
import { REASON_MAX_CHARS } from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'
import type { AgentEvent } from './types.ts'

export const EXECUTOR_LOST = 'EXECUTOR_LOST'

function isRecord (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** Whether `e` is a verdict (signed by a delegator, not by the executor). */
export function isVerdict (e: AgentEvent): boolean {
  return e.declared_by !== undefined
}

/**
 * The shape a verdict must have, whoever checks it: a run.failed after the
 * first event, failure code EXECUTOR_LOST with a message of at most
 * REASON_MAX_CHARS, `by` naming the signer. Throws
 * INVALID_REQUEST (reason bad_verdict) otherwise. The signature is checked
 * with the event (verifyEventSync); who may sign is `assertDeclaredBy`.
 */
export function assertVerdictShape (e: AgentEvent): void {
  const failure = e.payload.failure
  // the message within what a Run's failure holds (signVerdict cuts it so): else the executor's record of the run
  // it adopts breaks the Run schema, and no one can read the run from it again
  if (e.type !== 'run.failed' || e.seq < 2 || !isRecord(failure) || failure.code !== EXECUTOR_LOST ||
    typeof failure.message !== 'string' || failure.message.length > REASON_MAX_CHARS ||
    e.payload.reason !== 'executor_lost' || e.payload.by !== e.declared_by) {
    throw new InvalidRequestError('only a run.failed with failure code EXECUTOR_LOST may be signed by anyone but the executor', { reason: 'bad_verdict' })
  }
}

