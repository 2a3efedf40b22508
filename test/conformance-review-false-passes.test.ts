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
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { ConformanceReport } from '../src/conformance/runner.ts'
import { expectExactFailures, kitRuns, startTarget, type ExpectedFailures, type ReviewBreakage, type Target } from './fixtures/broken-targets.ts'

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

const BREAKAGES = Object.keys(EXPECTED) as ReviewBreakage[]

describe('the conformance kit against targets a review found it passing', () => {
  let targets = new Map<ReviewBreakage, Target>()
  let reports = new Map<ReviewBreakage, ConformanceReport>()

  beforeAll(async () => {
    // side by side: most of a kit's time is spent waiting on the target's own time limits
    ({ targets, reports } = await kitRuns(BREAKAGES, async () => {}, async b => startTarget(b)))
  }, 180_000)

  afterAll(async () => { await Promise.all([...targets.values()].map(async t => t.node.stop())) })

  for (const b of BREAKAGES) {
    it(`${b}: exactly ${EXPECTED[b].clauses.join(', ')} fail`, () => {
      const r = reports.get(b)!
      expectExactFailures(r, EXPECTED[b])
      expect(r.summary.must_failed.length).toBeGreaterThan(0)
    })
  }
})
