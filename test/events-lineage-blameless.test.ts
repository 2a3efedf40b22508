/**
 * Valid runs under a run that is not the followed owner's task without blame
 * (protocols/lineage.md: foreign, over_limit, not_named) are Ignored as their
 * ancestor is, not Rejected. Before, the judge saw every run not admitted here
 * as rejected, so a valid sub-delegation or handoff successor under another
 * owner's run (or under a run past the limits) was lineage_rejected: each
 * copy cost an honest relayer its gossipsub score. Forged runs under such a
 * run are still rejected. Found by session 57's review.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { gossipScore } from '../src/events/membership.ts'
import { correlationTopic } from '../src/events/topic.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { signEvent } from '../src/runlog/event.ts'
import { judgeRun, type LineageVerdict, type RunStanding } from '../src/runlog/lineage.ts'
import { issueDelegationTicket, type RunTicket } from '../src/runlog/ticket.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { collect } from './events-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:lineage-blameless', version: '1.0.0' }
const TASK = 'task-lineage-blameless'
const enc = new TextEncoder()

/** The run.started `key`'s agent signs for the run `ticket` delegates to it. */
async function started (key: PrivateKey, ticket: RunTicket): Promise<AgentEvent> {
  return signEvent(key, {
    run_id: ticket.run_id,
    correlation_id: TASK,
    type: 'run.started',
    payload: { delegator: ticket.delegator, capability: WORK, parent_run: ticket.parent_run, input: {}, ticket },
    at: new Date().toISOString(),
    seq: 1,
    prev: null,
    executor: ticket.executor
  })
}

/** Another owner's root run (owner O, executor X) and a valid sub-delegation X signs under it (to Y). */
async function foreignLine (): Promise<{ root: AgentEvent, sub: AgentEvent, rootTicket: RunTicket, subTicket: RunTicket }> {
  const [oKey, xKey, yKey] = await Promise.all([0, 1, 2].map(async () => generateKeyPair('Ed25519')))
  const rootTicket = await issueDelegationTicket(oKey!, { executor: agentIdOf(xKey!), correlation_id: TASK, capability: WORK, parent_run: null, authorized: [] })
  const subTicket = await issueDelegationTicket(xKey!, { executor: agentIdOf(yKey!), correlation_id: TASK, capability: WORK, parent_run: rootTicket.run_id, authorized: [] })
  return { root: await started(xKey!, rootTicket), sub: await started(yKey!, subTicket), rootTicket, subTicket }
}

describe('runs under a run not in the task without blame', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, H: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, H] = nodes as [MeshNode, MeshNode]
  })
  afterAll(async () => { await stopAll(nodes) })

  it('a valid sub-delegation under another owner\'s run is foreign, and its relayer keeps its score', async () => {
    const onA = await collect(A, TASK, { owner: A.agentId })
    const topic = correlationTopic(TASK)
    await until(() => H.host.services.pubsub.getSubscribers(topic).some(p => p.equals(A.host.peerId)), 'the relayer to see the follower')
    const { root, sub } = await foreignLine()
    const stats = A.events.stats.gossip
    await H.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(root)))
    await until(() => stats.foreign_owner >= 1, 'the foreign root judged')
    await H.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(sub)))
    await until(() => stats.foreign_owner + stats.lineage_rejected >= 2, 'the sub-delegation judged')
    // before: { foreign_owner: 1, lineage_rejected: 1 }, and the relayer's score at A fell below zero
    expect({ foreign_owner: stats.foreign_owner, lineage_rejected: stats.lineage_rejected }).toEqual({ foreign_owner: 2, lineage_rejected: 0 })
    expect(gossipScore(A.host, H.host.peerId.toString()) ?? 0).toBeGreaterThanOrEqual(0)
    expect(onA.events).toEqual([])
    onA.sub.close()
  })

  it('the judge carries a blameless ancestor\'s reason on to valid runs under it, and rejects forged ones', async () => {
    const { rootTicket, sub, subTicket } = await foreignLine()
    const parentAs = (verdict: LineageVerdict): (id: string) => RunStanding | undefined =>
      id => id === rootTicket.run_id ? { ticket: rootTicket, verdict, handoffTo: undefined } : undefined
    // before: parent_rejected for each
    expect(judgeRun(sub, parentAs({ status: 'rejected', reason: 'over_limit' }))).toEqual({ status: 'rejected', reason: 'over_limit' })
    expect(judgeRun(sub, parentAs({ status: 'rejected', reason: 'not_named_by_predecessor' }))).toEqual({ status: 'rejected', reason: 'not_named_by_predecessor' })
    // a parent rejected with blame still takes its runs with it
    expect(judgeRun(sub, parentAs({ status: 'rejected', reason: 'no_valid_ticket' }))).toEqual({ status: 'rejected', reason: 'parent_rejected' })
    // a sub-delegation that the over-limit run's executor did not sign is a forgery, whatever its parent's verdict
    const zKey = await generateKeyPair('Ed25519')
    const forgedTicket = await issueDelegationTicket(zKey, { executor: subTicket.executor, correlation_id: TASK, capability: WORK, parent_run: rootTicket.run_id, authorized: [] })
    // (the judge reads the ticket, not the event's signature: a copy of the valid start carrying Z's ticket)
    const forged: AgentEvent = { ...sub, run_id: forgedTicket.run_id, payload: { ...sub.payload, delegator: forgedTicket.delegator, ticket: forgedTicket } }
    expect(judgeRun(forged, parentAs({ status: 'rejected', reason: 'over_limit' }))).toEqual({ status: 'rejected', reason: 'not_parent_executor' })
  })
})
