/**
 * EVENTS_MAX_RUNS_PER_CORRELATION bounds the runs admitted to the owner's
 * task, and lineage.md promises "a flood cannot lock the owner's runs out".
 * The executor of any run of the task (here one that completed long ago) can
 * sign sub-delegation tickets under it without bound, for runs of a throwaway
 * key, and each proves its place (issuer = parent's executor). Before the
 * fix they filled the admitted runs, and every later run of the owner's own
 * was refused (over_limit) at every holder. Now the runs under one root are
 * at most EVENTS_MAX_RUNS_PER_ROOT and EVENTS_ROOT_RUNS_RESERVED are kept for
 * the owner's delegations. Found by session 45's events review.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_MAX_RUNS_PER_CORRELATION } from '../src/constants.ts'
import { correlationTopic } from '../src/events/topic.ts'
import { EVENTS_MAX_RUNS_PER_ROOT } from '../src/events/constants.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { signEvent } from '../src/runlog/event.ts'
import { issueDelegationTicket } from '../src/runlog/ticket.ts'
import { collect, type Collector } from './events-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:subdelegation-cap', version: '1.0.0' }
const TASK = 'task-subdelegation-cap'
const enc = new TextEncoder()

describe('a hostile executor of one run of the task', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, H: MeshNode
  let hKey: PrivateKey
  let onA: Collector

  beforeAll(async () => {
    hKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(3, { nodeOptions: i => i === 2 ? { privateKey: hKey } : {} })
    ;[A, B, H] = nodes as [MeshNode, MeshNode, MeshNode]
    for (const n of [B, H]) {
      n.runs.handle(WORK, async () => ({ ok: true }))
      await n.publishCard({ name: 'worker', capabilities: [WORK] })
    }
    onA = await collect(A, TASK, { owner: A.agentId })
  }, 60_000)
  afterAll(async () => { await stopAll(nodes) })

  it('cannot lock the owner\'s later runs out of its task', async () => {
    // the owner delegates one run to H, which completes it
    const r0 = await A.delegate({ to_agent: H.agentId, task_id: TASK, capability: WORK, input: {} })
    await onA.until(es => es.some(e => e.run_id === r0.run_id && e.type === 'run.completed'), 'H\'s run to complete')

    // H, long done, signs sub-delegations under its run for runs of a throwaway key
    const sybil = await generateKeyPair('Ed25519')
    const S = agentIdOf(sybil)
    const topic = correlationTopic(TASK)
    await until(() => H.host.services.pubsub.getSubscribers(topic).some(p => p.equals(A.host.peerId)), 'H to see A on the topic')
    const flood = EVENTS_MAX_RUNS_PER_CORRELATION
    const before = A.events.stats.gossip.accepted + A.events.stats.gossip.over_limit
    for (let i = 0; i < flood; i++) {
      const ticket = await issueDelegationTicket(hKey, { executor: S, correlation_id: TASK, capability: WORK, parent_run: r0.run_id, authorized: [H.agentId] })
      const e = await signEvent(sybil, {
        run_id: ticket.run_id, correlation_id: TASK, type: 'run.started', at: new Date().toISOString(), seq: 1, prev: null, executor: S,
        payload: { delegator: H.agentId, capability: WORK, parent_run: r0.run_id, input: {}, ticket: ticket as unknown as Record<string, unknown> }
      })
      await H.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(e)))
    }
    await until(() => A.events.stats.gossip.accepted + A.events.stats.gossip.over_limit >= before + flood, 'the flood judged', 60_000)

    // the owner's next run of its own task
    const r1 = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    await onA.until(es => es.some(e => e.run_id === r1.run_id && e.type === 'run.completed'), 'the owner\'s own later run', 10_000)
    expect(onA.events.filter(e => e.run_id === r1.run_id).map(e => e.type)).toEqual(['run.started', 'run.completed'])
    // the flood under H's run took no more than its root's share
    expect(onA.events.filter(e => e.executor === S && e.type === 'run.started')).toHaveLength(EVENTS_MAX_RUNS_PER_ROOT)
    expect(A.events.stats.gossip.over_limit).toBeGreaterThanOrEqual(flood - EVENTS_MAX_RUNS_PER_ROOT)
  }, 120_000)
})
