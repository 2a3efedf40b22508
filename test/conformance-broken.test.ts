/**
 * The conformance kit can fail: run against targets that are wrong in exactly
 * one way (test/fixtures/broken-targets.ts), exactly the clauses that name
 * that behaviour fail, and every other clause still passes. A target that
 * drops correlation_id from its events serves records that are no AgentEvent:
 * each check that reads one fails as well, with the record's schema error.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { runConformance, type ConformanceReport } from '../src/conformance/runner.ts'
import { startTarget, type Breakage, type Target } from './fixtures/broken-targets.ts'

const EXPECTED: Record<Breakage, { clauses: string[], checks: string[] }> = {
  'self-resume': { clauses: ['AAP-BLOCK-NO-SELF-RESUME', 'C3-NO-SELF-RESUME'], checks: ['self-resume'] },
  // an event without correlation_id is no AgentEvent: every check that reads one (a progress or a resume event) fails too
  'drop-correlation': {
    clauses: [
      'AAP-BLOCK-CHECKPOINT', 'AAP-BLOCK-NO-SELF-RESUME', 'AAP-RESUME-RESOLUTION', 'AAP-EVENTS-EMIT', 'AAP-EVENT-CORRELATION',
      'AAP-EVENT-BLOCKED-CHECKPOINT', 'AAP-HACP-CHECKPOINT-RAISE', 'AAP-HACP-CHECKPOINT-RESOLVE', 'AAP-CONF-PRIMITIVES',
      'AAP-CONF-CORRELATION', 'AAP-CONF-EVENT-STREAM', 'C2-EVENT-CORRELATION', 'C3-RAISE-IDENTIFIES', 'C3-BLOCK-CHECKPOINT',
      'C3-NO-SELF-RESUME', 'C3-RESOLVE-RESUMES', 'C3-AUDIT-ONE-TRANSITION'
    ],
    checks: ['block-checkpoint', 'checkpoint-raise', 'resume-resolution', 'resume-audit', 'self-resume', 'event-stream', 'run-logs', 'events-correlation']
  },
  'unknown-run-code': { clauses: ['AAP-ERROR-RUN_NOT_FOUND', 'AAP-CONF-ERRORS'], checks: ['unknown-run'] },
  // a resume from anyone is applied as the delegator's: the coordinator's on a run that authorizes nobody too
  'stranger-resume': { clauses: ['MESH-CONTROL-AUTHORITY'], checks: ['unauthorized-control', 'stranger-control'] },
  // its receiving side makes runs of its own choosing, so a legitimate handoff to it fails as well, and one naming more authority is taken
  'forged-handoff': {
    clauses: ['AAP-HANDOFF-NEW-RUN', 'AAP-HANDOFF-CORRELATION', 'C4-HANDOFF', 'C4-CORRELATION', 'MESH-HANDOFF-LINEAGE', 'MESH-HANDOFF-AUTHORITY'],
    checks: ['handoff-receive', 'forged-handoff', 'handoff-inheritance']
  }
}

const BREAKAGES = Object.keys(EXPECTED) as Breakage[]

describe('the conformance kit against deliberately broken targets', () => {
  const targets = new Map<Breakage, Target>()
  const reports = new Map<Breakage, ConformanceReport>()
  let meshPeer: MeshNode | undefined

  beforeAll(async () => {
    // one target is given to the kit by agent id only: the kit finds it through another mesh peer
    meshPeer = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'] })
    await meshPeer.start()
    const byId: Breakage = 'stranger-resume'
    // the kits run side by side: most of a kit's time is spent waiting on the target's own time limits
    await Promise.all(BREAKAGES.map(async (b) => {
      const t = await startTarget(b)
      targets.set(b, t)
      if (b === byId) {
        expect(await t.node.join(meshPeer!.addresses)).toBe(1)
        await t.node.publishCard({ name: 'conformance-target-by-id', capabilities: [...t.node.card!.capabilities], tags: [] })
        reports.set(b, await runConformance({ target: t.node.agentId, bootstrap: meshPeer!.addresses }))
      } else {
        reports.set(b, await runConformance({ target: t.address }))
      }
    }))
  }, 180_000)

  afterAll(async () => {
    await Promise.all([...[...targets.values()].map(async t => t.node.stop()), meshPeer?.stop()])
  })

  for (const b of BREAKAGES) {
    it(`${b}: exactly ${EXPECTED[b].clauses.join(', ')} fail`, () => {
      const r = reports.get(b)!
      expect(r.target).toBe(targets.get(b)?.node.agentId)
      expect(r.target_address).toBe(b === 'stranger-resume' ? null : targets.get(b)?.address)
      const failedChecks = r.checks.filter(c => c.status === 'fail')
      expect(failedChecks.map(c => c.id), JSON.stringify(failedChecks.map(c => [c.id, c.message]))).toEqual(EXPECTED[b].checks)
      expect(r.clauses.filter(c => c.status === 'fail').map(c => c.id).sort()).toEqual([...EXPECTED[b].clauses].sort())
      expect(r.summary.must_failed.length).toBeGreaterThan(0)
      // every other clause still passes (or cannot be observed on the wire)
      for (const c of r.clauses) if (!EXPECTED[b].clauses.includes(c.id)) expect([c.id, c.status]).toEqual([c.id, c.checks.length === 0 ? 'n/a' : 'pass'])
      // the failing check keeps its evidence
      expect(failedChecks[0]?.message).toBeTruthy()
      if (b === 'drop-correlation') {
        for (const c of failedChecks.filter(c => c.id !== 'events-correlation')) expect(c.message, c.id).toMatch(/not a signed AgentEvent: .*must have required property 'correlation_id'/)
      }
      expect(failedChecks[0]!.evidence.runs.length + failedChecks[0]!.evidence.frames.length + failedChecks[0]!.evidence.events.length).toBeGreaterThan(0)
    })
  }
})
