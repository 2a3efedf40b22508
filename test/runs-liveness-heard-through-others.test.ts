/**
 * Liveness across a partition that leaves the executor a path through others
 * (protocols/liveness.md): A delegated a run to B, A can no longer dial B,
 * but both still reach D, which follows the task, and B's signed events
 * reach A through D. A hears from B, so it declares nothing; when the link
 * heals the run goes on and completes.
 *
 * Before, only probes and new connections counted as signs of life: A
 * declared B lost once per bound while B's events kept replacing the
 * verdict, and at the heal the verdict it still held ended B's live run
 * (EXECUTOR_LOST "declared lost after seq N" though A had seen later seqs).
 * Found by session 55's review. The link is cut with each node's own
 * connection gater (dials and inbound connections between A and B refused)
 * and a hang-up, on real nodes over TCP on 127.0.0.1.
 */
import type { PeerId } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:liveness-through-others', version: '1.0.0' }
const TASK = 'task-liveness-through-others'
const LOST_AFTER_MS = 1_500
const PROBE_INTERVAL_MS = 200
/** Progress steps sent while the link is cut, each after a failed probe: several bounds of silence on the direct link. */
const STEPS_CUT = 24

interface Gater { denyDialPeer?: (p: PeerId) => boolean, denyInboundEncryptedConnection?: (p: PeerId) => boolean }

/** Refuse (or allow again) every connection between `a` and `b`, both ways. */
function setCut (a: MeshNode, b: MeshNode, cut: boolean): void {
  for (const [self, other] of [[a, b], [b, a]] as const) {
    const gater = (self.host as unknown as { components: { connectionGater: Gater } }).components.connectionGater
    const denied = (p: PeerId): boolean => cut && p.equals(other.host.peerId)
    gater.denyDialPeer = denied
    gater.denyInboundEncryptedConnection = denied
  }
}

describe('a delegator that hears its executor through others does not declare it lost', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, D: MeshNode
  /** Per run, the gates of its steps. */
  const steps = new Map<string, Array<PromiseWithResolvers<void>>>()
  const step = (runId: string, i: number): PromiseWithResolvers<void> => {
    const list = steps.get(runId) ?? []
    steps.set(runId, list)
    while (list.length <= i) list.push(Promise.withResolvers<void>())
    return list[i] as PromiseWithResolvers<void>
  }
  /** Cut A|B, with D (following the task) still between them. */
  const cut = async (): Promise<void> => {
    setCut(A, B, true)
    await A.host.hangUp(B.host.peerId)
    await B.host.hangUp(A.host.peerId)
  }
  const heal = async (): Promise<void> => {
    setCut(A, B, false)
    await A.join(B.addresses)
  }

  beforeAll(async () => {
    nodes = await startMesh(3, { transport: 'tcp', nodeOptions: i => i === 0 ? { liveness: { lostAfterMs: LOST_AFTER_MS, probeIntervalMs: PROBE_INTERVAL_MS } } : {} })
    ;[A, B, D] = nodes as [MeshNode, MeshNode, MeshNode]
    for (const [x, y] of [[A, B], [A, D], [B, D]] as const) await x.join(y.addresses)
    // B reports a step each time the test lets it, and completes after the last
    B.runs.handle(WORK, async (ctx) => {
      for (let i = 0; i <= STEPS_CUT; i++) {
        await step(ctx.run.run_id, i).promise
        await ctx.progress({ step: i })
      }
      return { steps: STEPS_CUT + 1 }
    })
    await B.publishCard({ name: 'worker', capabilities: [WORK] })
  }, 60_000)
  afterAll(async () => {
    for (const list of steps.values()) for (const s of list) s.resolve()
    await stopAll(nodes)
  })

  it('no verdict while B\'s events reach A through D; the run completes after the heal', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    // D follows the task, so it carries the task's gossip between A and B
    // A's own record of the run (getRun would ask B, which A cannot reach)
    const record = async (): Promise<Run> => await A.runs.store.getOutgoing(run.run_id) as Run
    const follower = await D.events.subscribe(TASK, { owner: A.agentId, participants: [B.agentId], onEvent: () => {} })
    try {
      await cut()
      const declaredBefore = A.runs.liveness.stats.declared
      for (let i = 0; i < STEPS_CUT; i++) {
        // a probe of B fails (the link is cut), then B's next step reaches A by way of D
        const failures = A.runs.liveness.stats.probeFailures
        await until(() => A.runs.liveness.stats.probeFailures > failures || A.runs.liveness.stats.declared > declaredBefore, 'a probe of B to fail')
        // before: declared once the probes had failed for LOST_AFTER_MS, B's events flowing or not
        expect(A.runs.liveness.stats.declared - declaredBefore, `declared lost at step ${i}`).toBe(0)
        step(run.run_id, i).resolve()
        await until(async () => ((await record()).last_seq) >= i + 2, `step ${i} to reach A through D`)
      }
      // B was silent on the direct link for several bounds, and heard from all along
      expect(A.runs.liveness.stats.probeFailures).toBeGreaterThan(LOST_AFTER_MS / PROBE_INTERVAL_MS)
      expect(A.runs.liveness.stats.declared - declaredBefore).toBe(0)
      expect((await record()).state).toBe('running')
      // the link heals, and B finishes
      await heal()
      step(run.run_id, STEPS_CUT).resolve()
      await until(async () => (await B.runs.getRun(run.run_id)).state !== 'running', 'B to end the run')
      expect((await B.runs.getRun(run.run_id)).state).toBe('completed')
      await until(async () => (await A.runs.getRun(run.run_id)).state === 'completed', 'A to see the run completed')
    } finally {
      follower.close()
    }
  }, 120_000)

  it('a verdict replaced by B\'s events through D is not handed to B at the heal: its run goes on', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: `${TASK}-2`, capability: WORK, input: {} })
    const record = async (): Promise<Run> => await A.runs.store.getOutgoing(run.run_id) as Run
    const follower = await D.events.subscribe(`${TASK}-2`, { owner: A.agentId, participants: [B.agentId], onEvent: () => {} })
    // an application on A follows the task too, so A stays on its topic after the verdict
    const own = await A.events.subscribe(`${TASK}-2`, { owner: A.agentId, participants: [B.agentId], onEvent: () => {} })
    try {
      await cut()
      // B says nothing for longer than the bound: A declares it lost, as it should
      await until(async () => (await record()).state === 'failed', 'A to declare B lost')
      // then B's next step reaches A through D, and replaces the verdict
      step(run.run_id, 0).resolve()
      await until(async () => (await record()).state === 'running', 'B\'s event to replace the verdict')
      expect(A.runs.liveness.openNotices).toBe(0)
      // before: the verdict stayed open, was offered to B at the heal, and B's live run ended EXECUTOR_LOST
      await heal()
      // A's rounds reach B again (a notice still open would be offered in them), and B's run is still live
      const probes = A.runs.liveness.stats.probes
      await until(async () => A.runs.liveness.stats.probes >= probes + 3 || (await B.runs.getRun(run.run_id)).state !== 'running', 'A to probe B again after the heal')
      expect((await B.runs.getRun(run.run_id)).state).toBe('running')
      for (let i = 1; i <= STEPS_CUT; i++) step(run.run_id, i).resolve()
      await until(async () => (await B.runs.getRun(run.run_id)).state !== 'running', 'B to end the run')
      expect((await B.runs.getRun(run.run_id)).state).toBe('completed')
      await until(async () => (await A.runs.getRun(run.run_id)).state === 'completed', 'A to see the run completed')
    } finally {
      follower.close()
      own.close()
    }
  }, 120_000)
})
