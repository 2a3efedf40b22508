/**
 * Gossip relays what a node places late or has already (protocols/events.md,
 * "Validator verdicts"): an event that comes ahead of its predecessor is held
 * and forwarded (`early`), then placed in order; a canonical copy of an event
 * the node holds already is forwarded once (`relayed`), a re-encoded one is
 * not. Before, both were ignored, so they stopped at the first node that saw
 * them out of turn and its mesh peers fell back on sync.
 *
 * Layout: A delegates to B (one island: the run's true log). S and T follow
 * the correlation in another island that cannot reach A or B, so nothing
 * comes by sync; H, connected to S only, publishes B's events in the order
 * the test chooses. T hears only what S forwards.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { agentIdOf } from '../src/identity/identity.ts'
import { signEvent } from '../src/runlog/event.ts'
import { canonicalJson } from '../src/identity/signing.ts'
import { correlationTopic } from '../src/events/topic.ts'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { collect, expectSeqOrdered, type Collector } from './events-helpers.ts'

const CAP = { capability_id: 'cap:early-relay', version: '1.0.0' }
const TASK = 'task-early-relay-01'
const enc = new TextEncoder()

describe('gossip relays early and repeated events', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, S: MeshNode, T: MeshNode, H: MeshNode
  let s: Collector, t: Collector
  let real: AgentEvent[] = []
  let bKey: PrivateKey
  const topic = correlationTopic(TASK)
  const publish = async (bytes: string): Promise<void> => { await H.host.services.pubsub.publish(topic, enc.encode(bytes)) }

  beforeAll(async () => {
    bKey = await generateKeyPair('Ed25519')
    ;[A, B] = await startMesh(2, { nodeOptions: i => i === 1 ? { privateKey: bKey } : {} }) as [MeshNode, MeshNode]
    B.runs.handle(CAP, async (ctx) => {
      for (let i = 1; i <= 3; i++) await ctx.progress({ step: i })
      await ctx.block('held for the test', 'cp-early-relay')
      return { ok: true }
    })
    await B.publishCard({ name: 'executor-b', capabilities: [CAP] })
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: CAP, input: {} })
    await until(async () => ((await B.events.readCorrelation(TASK)).get(run.run_id)?.length ?? 0) >= 5, 'the run blocked')
    real = (await B.events.readCorrelation(TASK)).get(run.run_id)!
    expect(real.map(e => e.type)).toEqual(['run.started', 'run.progress', 'run.progress', 'run.progress', 'run.blocked'])

    ;[S, T] = await startMesh(2) as [MeshNode, MeshNode]
    H = (await startMesh(1))[0]!
    nodes = [A, B, S, T, H]
    expect(await H.join(S.addresses)).toBe(1)
    s = await collect(S, TASK)
    t = await collect(T, TASK)
    const pubsub = (n: MeshNode): { getMeshPeers: (topic: string) => string[] } => n.host.services.pubsub as unknown as { getMeshPeers: (topic: string) => string[] }
    await until(() => pubsub(S).getMeshPeers(topic).includes(T.host.peerId.toString()) && pubsub(T).getMeshPeers(topic).includes(S.host.peerId.toString()), 'S and T meshed on the topic')
    await until(() => H.host.services.pubsub.getSubscribers(topic).some(p => p.equals(S.host.peerId)), 'H seeing S on the topic')
  })
  afterAll(async () => { await stopAll(nodes) })

  it('holds an event that comes before its predecessor, forwards it, and delivers both in order', async () => {
    await publish(canonicalJson(real[0]))
    await s.until(es => es.length === 1, 'run.started at S')
    await t.until(es => es.length === 1, 'run.started at T')

    await publish(canonicalJson(real[2]))
    await until(() => S.events.stats.gossip.early === 1, 'seq 3 held early at S')
    // T is connected to S only: it has seq 3 because S forwarded it
    await until(() => T.events.stats.gossip.early === 1, 'seq 3 held early at T')
    expect(s.events.map(e => e.seq)).toEqual([1])
    expect(t.events.map(e => e.seq)).toEqual([1])

    await publish(canonicalJson(real[1]))
    for (const c of [s, t]) {
      const got = await c.until(es => es.length === 3, 'seqs 1 to 3')
      expectSeqOrdered(got)
      expect(got.map(e => e.signature)).toEqual(real.slice(0, 3).map(e => e.signature))
    }
    expect(S.events.stats.gossip.gap).toBe(0)
  })

  it('forwards a canonical copy of an event it already holds, and not a re-encoded one', async () => {
    // seq 4 arrives first re-encoded (keys reversed: another message id), and is placed
    const reversed = (e: AgentEvent, pad: number): string => JSON.stringify(Object.fromEntries(Object.entries(e).reverse()), null, pad)
    await publish(reversed(real[3]!, 0))
    await s.until(es => es.length === 4, 'seq 4 at S')
    await t.until(es => es.length === 4, 'seq 4 at T')

    const sRelayed = S.events.stats.gossip.relayed
    const tRelayed = T.events.stats.gossip.relayed
    await publish(canonicalJson(real[3]))
    await until(() => S.events.stats.gossip.relayed === sRelayed + 1, 'the canonical copy relayed by S')
    await until(() => T.events.stats.gossip.relayed === tRelayed + 1, 'the canonical copy reaching T through S')

    const sDuplicate = S.events.stats.gossip.duplicate
    await publish(reversed(real[3]!, 2))
    await until(() => S.events.stats.gossip.duplicate === sDuplicate + 1, 'the second re-encoding judged at S')
    expect(S.events.stats.gossip.relayed).toBe(sRelayed + 1)
    expect(s.events).toHaveLength(4)
    expect(t.events).toHaveLength(4)
  })
  it('holds nothing it could never place: a verdict its run\'s delegator did not sign, or an event past what the correlation could hold', async () => {
    // S holds seqs 1 to 4 of the run; B signed seq 5, which S has not seen
    const head = real[3]!
    const stranger = await generateKeyPair('Ed25519')
    const forged = await signEvent(stranger, {
      run_id: head.run_id,
      correlation_id: TASK,
      type: 'run.failed',
      payload: { failure: { code: 'EXECUTOR_LOST', message: 'declared by a stranger' }, reason: 'executor_lost', by: agentIdOf(stranger), after_seq: head.seq + 1 },
      at: new Date().toISOString(),
      seq: head.seq + 2,
      prev: 'a'.repeat(64),
      executor: B.agentId,
      declared_by: agentIdOf(stranger)
    })
    const before = { ...S.events.stats.gossip }
    await publish(canonicalJson(forged))
    await until(() => S.events.stats.gossip.forged_verdict === before.forged_verdict + 1, 'the forged verdict refused at S')
    // B's own event, but farther ahead than the correlation could ever hold: not held, the gap is fetched
    const far = await signEvent(bKey, { run_id: head.run_id, correlation_id: TASK, type: 'run.progress', payload: { step: 99 }, at: new Date().toISOString(), seq: head.seq + 66, prev: 'b'.repeat(64), executor: B.agentId })
    await publish(canonicalJson(far))
    await until(() => S.events.stats.gossip.gap === before.gap + 1, 'the far event judged a gap at S')
    expect(S.events.stats.gossip.early).toBe(before.early)
    // nothing of either reached T: neither was forwarded
    expect(T.events.stats.gossip.forged_verdict).toBe(0)
    expect(T.events.stats.gossip.early).toBe(1)
    expect(s.events).toHaveLength(4)
  })
})
