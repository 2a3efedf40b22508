/**
 * Targets a second review found the conformance kit passing, each wrong in
 * one way (test/fixtures/broken-targets.ts, GapBreakage): the kit must fail
 * exactly the checks and clauses that name the behaviour, and pass every
 * other clause.
 *
 *  - replay-hides-taken: handoff-receive and subdelegation-accepted read the
 *    target's per-task event stream for the run it took over, and
 *    replay-taken (AAP-EVENT-REPLAY, a SHOULD) holds it to serve that run's
 *    whole log;
 *  - card-unanswered: discover and card-capref take the target's card only
 *    from the target itself (one get_card to it), not the copy the kit's
 *    nodes hold in the DHT;
 *  - handoff-skips-executor: forged-handoff sends frames that carry the
 *    genuine predecessor and a ticket issued by their sender, so rule 3 of
 *    protocols/handoff.md (not rule 4's missing ticket) must refuse them.
 */
import { describe, expect, it } from 'vitest'
import { runConformance } from '../src/conformance/runner.ts'
import { describeBrokenTargets, expectExactFailures, startTarget, type ExpectedFailures, type GapBreakage } from './fixtures/broken-targets.ts'

const EXPECTED: Record<GapBreakage, ExpectedFailures & { should?: true }> = {
  'replay-hides-taken': {
    clauses: ['AAP-EVENT-REPLAY'],
    checks: ['replay-taken'],
    message: {
      'replay-taken': /handoff-receive: the target's replay of task \S+ shows its run \S+ as \[\], its own log as \[1:run\.started 2:run\.completed\]; subdelegation-accepted: the target's replay of task \S+ shows its run \S+ as \[\], its own log as \[1:run\.started 2:run\.completed\]/
    },
    should: true
  },
  'card-unanswered': {
    clauses: ['AAP-CARD-DISCOVERABLE', 'AAP-CARD-CAPREF', 'AAP-DISCOVER-SUPPORT', 'AAP-DISCOVER-REACH', 'AAP-DISCOVER-TAGS', 'AAP-CONF-PRIMITIVES', 'C1-CAPREF-ONLY'],
    checks: ['discover', 'discover-tags', 'card-capref'],
    message: {
      discover: /no answer to get_card|did not answer get_card/,
      'card-capref': /no answer to get_card|did not answer get_card/
    }
  },
  'handoff-skips-executor': {
    clauses: ['MESH-HANDOFF-LINEAGE'],
    checks: ['forged-handoff'],
    message: { 'forged-handoff': /a handoff from a peer claiming to continue another agent's run: expected UNAUTHORIZED, got INVALID_REQUEST/ }
  }
}

describeBrokenTargets('the conformance kit against targets a second review found it passing', EXPECTED)

describe('the conformance kit against an honest target, with the second review\'s checks', () => {
  it('an honest target passes every clause, with the runs it took over replayed and its card fetched from it', async () => {
    const t = await startTarget()
    try {
      const r = await runConformance({ target: t.address })
      expectExactFailures(r, { clauses: [], checks: [], message: {} })
      const taken = r.checks.find(c => c.id === 'replay-taken')!
      expect(taken.evidence.events.filter(e => / run\.completed$/.test(e))).toHaveLength(2)
      const discover = r.checks.find(c => c.id === 'discover')!
      expect(discover.evidence.notes.some(n => /a card-only node reached \S+ by its agent id: get_run answered RUN_NOT_FOUND/.test(n))).toBe(true)
    } finally {
      await t.node.stop()
    }
  }, 180_000)
})
