/**
 * A correlation's participants (the agents a correlation-wide sync asks)
 * cannot be filled by strangers: the executor of a run known only from its
 * own events past seq 1 is a participant on its word alone, is not asked for
 * the whole correlation, and gives way to one someone vouches for (a
 * subscriber's hint). Before, 64 throwaway keys filled the set and the
 * subscriber's own participant was dropped without a word.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_MAX_PARTICIPANTS } from '../src/constants.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { correlationTopic } from '../src/events/topic.ts'
import type { MeshNode } from '../src/node.ts'
import { newRunId, signEvent } from '../src/runlog/event.ts'
import { collect } from './events-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const TASK = 'task-participants-strangers'
const enc = new TextEncoder()

describe('participants a stranger names', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, R: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[A, B, R] = nodes as [MeshNode, MeshNode, MeshNode]
  })
  afterAll(async () => { await stopAll(nodes) })

  it('give way to the participant a subscriber names, and are not asked for the correlation', async () => {
    await collect(A, TASK)
    const topic = correlationTopic(TASK)
    await until(() => R.host.services.pubsub.getSubscribers(topic).some(p => p.equals(A.host.peerId)), 'R to see A on the topic')
    const before = A.events.stats.gossip.unknown_run
    const correlationSyncs = A.events.stats.syncRequests.correlation
    for (let i = 0; i < EVENTS_MAX_PARTICIPANTS; i++) {
      // each from a key of its own: a participant each
      const key = await generateKeyPair('Ed25519')
      const e = await signEvent(key, { run_id: newRunId(agentIdOf(key)), correlation_id: TASK, type: 'run.progress', payload: { i }, at: new Date().toISOString(), seq: 2, prev: 'a'.repeat(64), executor: agentIdOf(key) })
      await R.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(e)))
    }
    await until(() => A.events.stats.gossip.unknown_run >= before + EVENTS_MAX_PARTICIPANTS, 'the strangers\' events judged')
    expect(A.events.participants(TASK)).toHaveLength(EVENTS_MAX_PARTICIPANTS)
    // none of them was asked for the whole correlation (their runs are fetched one by one)
    expect(A.events.stats.syncRequests.correlation).toBe(correlationSyncs)
    const sub = await A.events.subscribe(TASK, { participants: [B.agentId], onEvent: () => {} })
    try {
      expect(A.events.participants(TASK)).toContain(B.agentId)
      expect(A.events.participants(TASK)).toHaveLength(EVENTS_MAX_PARTICIPANTS)
      expect(A.events.stats.participantsRefused).toBe(0)
    } finally {
      sub.close()
    }
  })
})
