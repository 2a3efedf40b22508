/**
 * Targets a review found the conformance kit passing, each wrong in one way
 * (test/fixtures/broken-targets.ts, ReviewBreakage): the kit must fail
 * exactly the checks and clauses that name the behaviour, and pass every
 * other clause.
 *
 *  - cancel-then-complete, cancel-blocked-as-resume: run-logs folds every log
 *    through the profile's transitions and holds each run whose cancel the
 *    target accepted to end failed, with run.failed;
 *  - per-peer-control: unauthorized-control tries the coordinator (authorized
 *    on the kit's other runs) and the receiver on runs that authorize nobody;
 *  - malformed-any-code: a block without checkpoint_id and a resume without
 *    resolution must be refused INVALID_REQUEST or INVALID_TRANSITION;
 *  - handoff-takes-request: handoff-inheritance sends the target, from the
 *    run's real executor, handoff frames that name more authority than the
 *    delegator signed for.
 */
import { describeBrokenTargets, type ExpectedFailures, type ReviewBreakage } from './fixtures/broken-targets.ts'

const EXPECTED: Record<ReviewBreakage, ExpectedFailures> = {
  'cancel-then-complete': {
    clauses: ['AAP-EVENTS-EMIT', 'AAP-CONF-EVENT-STREAM'],
    checks: ['run-logs'],
    message: { 'run-logs': /\d+:run\.completed after the run ended failed/ }
  },
  'cancel-blocked-as-resume': {
    clauses: ['AAP-EVENTS-EMIT', 'AAP-CONF-EVENT-STREAM'],
    checks: ['run-logs'],
    message: { 'run-logs': /the target accepted a cancel of it, yet it is completed and its log ends with run\.completed/ }
  },
  'per-peer-control': {
    clauses: ['MESH-CONTROL-AUTHORITY'],
    checks: ['unauthorized-control'],
    message: { 'unauthorized-control': /from the coordinator, authorized on other runs: expected UNAUTHORIZED, but it succeeded/ }
  },
  'malformed-any-code': {
    clauses: ['AAP-BLOCK-CHECKPOINT', 'AAP-EVENT-BLOCKED-CHECKPOINT', 'AAP-HACP-CHECKPOINT-RAISE', 'C3-BLOCK-CHECKPOINT', 'AAP-RESUME-RESOLUTION', 'AAP-HACP-CHECKPOINT-RESOLVE', 'AAP-CONF-PRIMITIVES', 'C3-RESOLVE-RESUMES'],
    checks: ['block-checkpoint', 'resume-resolution'],
    message: {
      'block-checkpoint': /block without checkpoint_id: expected INVALID_REQUEST or INVALID_TRANSITION, got UNAUTHORIZED/,
      'resume-resolution': /resume without resolution: expected INVALID_REQUEST or INVALID_TRANSITION, got UNAUTHORIZED/
    }
  },
  'handoff-takes-request': {
    clauses: ['MESH-HANDOFF-AUTHORITY'],
    checks: ['handoff-inheritance'],
    message: { 'handoff-inheritance': /a handoff from the run's executor naming one more authorized agent: expected UNAUTHORIZED, but it succeeded/ }
  }
}

describeBrokenTargets('the conformance kit against targets a review found it passing', EXPECTED)
