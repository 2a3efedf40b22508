/**
 * A stranger's startless run (events past seq 1 under a run id of its own,
 * announced on gossip and nothing else) is fetched from its executor, the
 * stranger, and from nobody else. Before the fix, when the stranger refused
 * the sync, Syncer.fetch asked every other participant of the correlation in
 * turn (each answered with nothing, so the loop went on): one gossip message
 * from a stranger cost each subscriber 1 + |participants| syncs (up to 65),
 * against honest peers. Found by session 45's events review.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_SYNC_PROTOCOL } from '../src/constants.ts'
import { correlationTopic } from '../src/events/topic.ts'
import type { MeshNode } from '../src/node.ts'
import { newRunId, signEvent } from '../src/runlog/event.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const TASK = 'task-startless-amplify'
const enc = new TextEncoder()

describe('a stranger\'s startless run', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, S: MeshNode
  let sKey: PrivateKey

  beforeAll(async () => {
    sKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(6, { nodeOptions: i => i === 1 ? { privateKey: sKey } : {} })
    A = nodes[0]!
    S = nodes[1]!
    await S.host.unhandle(EVENTS_SYNC_PROTOCOL)
  })
  afterAll(async () => { await stopAll(nodes) })

  it('costs a subscriber no sync with the honest participants when its executor will not answer', async () => {
    const honest = nodes.slice(2)
    await A.events.subscribe(TASK, { participants: honest.map(n => n.agentId) })
    const topic = correlationTopic(TASK)
    await S.host.dial(A.host.peerId)
    await until(() => S.host.services.pubsub.getSubscribers(topic).some(p => p.equals(A.host.peerId)), 'the stranger to see the subscriber')
    // let the subscription's own first syncs settle
    const t = (A.events as unknown as { correlations: { get: (id: string) => { inflight: Set<unknown> } } }).correlations.get(TASK)!
    await until(() => t.inflight.size === 0, 'the first syncs')
    const runsBefore = A.events.stats.syncRequests.run
    const judgedBefore = A.events.stats.gossip.unknown_run
    const e = await signEvent(sKey, {
      run_id: newRunId(S.agentId), correlation_id: TASK, type: 'run.progress', payload: { junk: true },
      at: new Date().toISOString(), seq: 2, prev: 'a'.repeat(64), executor: S.agentId
    })
    await S.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(e)))
    await until(() => A.events.stats.gossip.unknown_run > judgedBefore, 'the junk event judged')
    await until(() => t.inflight.size === 0, 'the junk run\'s fetch to end')
    // the run is known only from the stranger's word: it is asked of the stranger, not of every honest participant
    expect(A.events.stats.syncRequests.run - runsBefore).toBe(1)
  })
})
