/**
 * Liveness verdicts (protocols/liveness.md). When a run's executor has been
 * unreachable for longer than its delegator's bound, the delegator ends the
 * run: it signs, in the executor's place, a `run.failed` with failure code
 * EXECUTOR_LOST that extends the run's chain from the last event it holds.
 * The event names its signer in `declared_by`; only the run's delegator (as
 * its ticket names it) may sign one, and only this one kind of event.
 */
import type { PrivateKey } from '@libp2p/interface'
import { REASON_MAX_CHARS } from '../constants.ts'
import { UnauthorizedError } from '../errors.ts'
import { eventHash, signEvent } from './event.ts'
import type { AgentEvent } from './types.ts'
import { EXECUTOR_LOST } from './verdict-shape.ts'
import { cutText } from '../util/text.ts'

export { EXECUTOR_LOST, assertVerdictShape, isVerdict } from './verdict-shape.ts'

/** UNAUTHORIZED unless the verdict's signer is the run's delegator. */
export function assertDeclaredBy (e: AgentEvent, delegator: string | undefined): void {
  if (delegator === undefined || e.declared_by !== delegator) {
    throw new UnauthorizedError('only a run\'s delegator may declare its executor lost', { reason: 'not_delegator' })
  }
}

/**
 * The verdict on a run whose last event known to the delegator is `head`:
 * seq head.seq + 1, chained to it, signed by `delegatorKey`.
 */
export async function signVerdict (delegatorKey: PrivateKey, delegator: string, head: AgentEvent, message: string, at = new Date().toISOString()): Promise<AgentEvent> {
  return signEvent(delegatorKey, {
    run_id: head.run_id,
    correlation_id: head.correlation_id,
    type: 'run.failed',
    payload: {
      failure: { code: EXECUTOR_LOST, message: cutText(message, REASON_MAX_CHARS) },
      reason: 'executor_lost',
      by: delegator,
      after_seq: head.seq
    },
    at,
    seq: head.seq + 1,
    prev: eventHash(head),
    executor: head.executor,
    declared_by: delegator
  })
}
