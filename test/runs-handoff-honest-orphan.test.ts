/**
 * "If B's call to C times out while C still creates the run ... the old run
 * stays as it was" and "can be handed off again" (handoff.md). When B does
 * hand it off again (to D), the honest receiver C's orphan S1 is
 * `not_named_by_predecessor` on every bystander: not the task's, but its
 * events are Ignored (`not_named`), not Rejected. Found by session 44's
 * review: every later event C published for S1 (its delegator's cancel here;
 * in the field, C's own HANDOFF_UNCONFIRMED failure) was judged
 * `lineage_rejected`, which gossip Rejects, so C was scored as a forger for
 * following the protocol.
 */
import type { PrivateKey } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { VERDICT_RESULT } from '../src/events/track.ts'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent, Run } from '../src/runlog/types.ts'
import { TopicValidatorResult } from '@libp2p/gossipsub'
import { holdingWorkers, startMesh, stopAll, until } from './helpers.ts'
import { phaseOneHandoff } from './fixtures/raw-handoff.ts'
import { rawGossip } from './fixtures/raw-gossip.ts'

const WORK = { capability_id: 'cap:honest-rejected', version: '1.0.0' }

describe('an honest receiver\'s orphan after a retried handoff', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode, D: MeshNode, E: MeshNode
  let bKey: PrivateKey
  const held = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    bKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(5, { nodeOptions: i => ({ handoffConfirmTimeoutMs: 60_000, ...(i === 1 ? { privateKey: bKey } : {}) }) })
    ;[A, B, C, D, E] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode, MeshNode]
    await holdingWorkers([B, C, D], WORK, held)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  /**
   * A delegates R to B (held); B's first handoff to C creates S1 there, but B's call gave up (phase one only, as in
   * handoff.md's timeout case); the bystander E, following the task, holds S1's run.started pending R's handoff event.
   */
  async function orphan (task: string): Promise<{ seen: AgentEvent[], sub: { close?: () => void }, r: Run, s1: Run }> {
    const seen: AgentEvent[] = []
    const sub = await E.events.subscribe(task, { owner: A.agentId })
    void (async () => { for await (const e of sub) seen.push(e) })()
    const r = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    await until(() => held.has(r.run_id), 'R to start')
    await until(() => seen.some(e => e.run_id === r.run_id && e.seq === 1), 'the bystander to hold R')
    // C follows the task before it creates S1, and sees E on its topic: S1's start is then no first publish on a
    // topic C has just joined, which gossip may lose (mesh-design.md), and E judges it on gossip
    const onC = await C.events.subscribe(task, { owner: A.agentId })
    await rawGossip(C, E, task)
    const pending0 = E.events.stats.gossip.lineage_pending
    const answer = await phaseOneHandoff(B, bKey, C, r)
    onC.close?.()
    expect(answer.ok).toBe(true)
    const s1 = answer.body!.run
    await until(() => E.events.stats.gossip.lineage_pending > pending0, 'the bystander to hold S1 pending')
    return { seen, sub, r, s1 }
  }

  it('S1\'s later events are Ignored on a bystander, not Rejected', async () => {
    expect(VERDICT_RESULT.lineage_rejected).toBe(TopicValidatorResult.Reject)
    expect(VERDICT_RESULT.not_named).toBe(TopicValidatorResult.Ignore)
    const { seen, sub, r, s1 } = await orphan('task-honest-rejected')

    // B hands R off again, as the protocol allows, this time to D
    const s2 = await B.runs.handoff(r.run_id, D.agentId, {})
    await until(() => seen.some(e => e.run_id === s2.run_id && e.seq === 1), 'the bystander to admit S2')

    // C's next event for its honest orphan S1 (the delegator cancels it) is Ignored, not Rejected as a forgery
    const rejected0 = E.events.stats.gossip.lineage_rejected
    const unnamed0 = E.events.stats.gossip.not_named
    await A.runs.cancel(s1.run_id, 'not needed')
    await until(() => E.events.stats.gossip.not_named > unnamed0, 'the bystander to Ignore C\'s event for S1')
    expect(E.events.stats.gossip.lineage_rejected).toBe(rejected0)
    expect(seen.some(e => e.run_id === s1.run_id)).toBe(false)
    sub.close?.()
  })

  it('a predecessor that ends handing off to no one: its receiver\'s orphan is not_named on a bystander, not held pending for good', async () => {
    const { seen, sub, r, s1 } = await orphan('task-honest-orphan-ended')

    // R ends as its handler returns: it will never name S1
    held.get(r.run_id)!.resolve()
    await until(() => seen.some(e => e.run_id === r.run_id && e.type === 'run.completed'), 'the bystander to see R end')

    // C's next event for S1 is not_named (Ignored) at once, not held as pending
    const unnamed0 = E.events.stats.gossip.not_named
    const pending1 = E.events.stats.gossip.lineage_pending
    await A.runs.cancel(s1.run_id, 'not needed')
    await until(() => E.events.stats.gossip.not_named > unnamed0, 'the bystander to Ignore C\'s event for S1 as not named')
    expect(E.events.stats.gossip.lineage_pending).toBe(pending1)
    expect(seen.some(e => e.run_id === s1.run_id)).toBe(false)
    sub.close?.()
  })
})
