/**
 * A follower on a third node that holds a delegator's liveness verdict, and
 * was cut off while the executor's own event replaced it, converges once it
 * can reach the others again, however long after the verdict
 * (protocols/liveness.md: the executor's events from the verdict's seq stand).
 * Before, its tail rounds stopped once EVENTS_QUIET_WATCH_MS had passed with
 * no live run (a run whose last event is a verdict is not live), and the
 * delegator's republish of the replacement is gossiped once: the follower
 * showed the run failed for good. Found by session 55's partition review.
 *
 * The quiet watch (a minute) is ended by hand on the follower's track rather
 * than waited for. Links are cut with each node's own connection gater and a
 * hang-up, on real nodes over TCP on 127.0.0.1.
 */
import type { PeerId } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { until } from './helpers.ts'
import { collect } from './events-helpers.ts'
import { cutControl, gatedWorker } from './fixtures/control-cut.ts'
import { corrTrack } from './fixtures/held-lock.ts'

const GATE = { capability_id: 'cap:verdict-follower', version: '1.0.0' }
const TASK = 'task-verdict-follower'

interface Gater { denyDialPeer?: (p: PeerId) => boolean, denyInboundEncryptedConnection?: (p: PeerId) => boolean }

/** Refuse (or allow again) every connection between `node` and `others`, on `node`'s side and theirs. */
function setCut (node: MeshNode, others: MeshNode[], cut: boolean): void {
  const gaterOf = (n: MeshNode): Gater => (n.host as unknown as { components: { connectionGater: Gater } }).components.connectionGater
  const deny = (among: MeshNode[]) => (p: PeerId): boolean => cut && among.some(o => p.equals(o.host.peerId))
  gaterOf(node).denyDialPeer = deny(others)
  gaterOf(node).denyInboundEncryptedConnection = deny(others)
  for (const o of others) {
    gaterOf(o).denyDialPeer = deny([node])
    gaterOf(o).denyInboundEncryptedConnection = deny([node])
  }
}

describe('a follower that missed the replacement of a verdict', () => {
  let A: MeshNode, B: MeshNode, D: MeshNode
  const gates = new Map<string, PromiseWithResolvers<void>>()
  const opts = { listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true }

  beforeAll(async () => {
    A = await createMeshNode({ ...opts, liveness: { lostAfterMs: 1500, probeIntervalMs: 200 } })
    B = await createMeshNode(opts)
    D = await createMeshNode(opts)
    for (const n of [A, B, D]) await n.start()
    await B.join([A.addresses[0]!])
    await D.join([A.addresses[0]!])
    await D.join([B.addresses[0]!])
    await gatedWorker(B, GATE, gates)
  }, 60_000)
  afterAll(async () => {
    for (const g of gates.values()) g.resolve()
    for (const n of [A, B, D]) await n?.stop()
  })

  it('gets the executor\'s event after the quiet watch, once it reaches the others again', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: GATE, input: {} })
    const onD = await collect(D, TASK, { owner: A.agentId, participants: [B.agentId] })
    try {
      await until(() => gates.has(TASK), 'B at work')
      // B stops answering run control: A declares it lost, and D gets the verdict
      const restore = await cutControl(B)
      await onD.until(evs => evs.some(e => e.run_id === run.run_id && e.declared_by !== undefined), 'the verdict at D', 30_000)
      // D is cut off; B comes back and completes the run, which replaces the verdict at A (and A republishes it)
      setCut(D, [A, B], true)
      for (const o of [A, B]) await D.host.hangUp(o.host.peerId)
      await restore()
      gates.get(TASK)!.resolve()
      await until(async () => (await A.runs.store.getOutgoing(run.run_id))?.state === 'completed', 'A to take B\'s completion', 30_000)
      // D's quiet watch runs out while it is cut off (set, not waited for: it is a minute)
      const t = corrTrack(D, TASK)
      t.quietUntil = Date.now()
      const rounds = D.events.stats.syncRequests.correlation
      // the next tail round: before, it stopped the rounds (no timer armed again); now it asks the participants again
      await until(() => D.events.stats.syncRequests.correlation > rounds || t.tailTimer === undefined, 'D\'s next tail round', 45_000)
      expect(t.tailTimer, 'D\'s tail rounds stopped with a verdict standing').toBeDefined()
      setCut(D, [A, B], false)
      await D.join([A.addresses[0]!])
      await onD.until(evs => evs.some(e => e.run_id === run.run_id && e.type === 'run.completed'), 'B\'s completion at D', 45_000)
      expect((await D.events.lastEvent(run.run_id))?.type).toBe('run.completed')
    } finally {
      onD.sub.close()
    }
  }, 150_000)
})
