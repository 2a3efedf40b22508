/**
 * A participant that repeats its SUBSCRIBE does not keep a subscriber's
 * quiet watch open (protocols/events.md, Tails). gossipsub takes a SUBSCRIBE
 * for a topic the peer is already on as a no-op but still reports it
 * (subscription-change); each report was taken for a join, and with no run
 * left that could move each one reset the tail's delay to
 * EVENTS_TAIL_SYNC_MIN_MS and moved the watch's end: every round a
 * whole-correlation sync from every vouched participant, for as long as the
 * peer went on. Found by session 57's review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { SubscriptionChangeData } from '@libp2p/gossipsub'
import { EVENTS_TAIL_SYNC_MIN_MS } from '../src/constants.ts'
import type { CorrTrack } from '../src/events/track.ts'
import { correlationTopic } from '../src/events/topic.ts'
import type { MeshNode } from '../src/node.ts'
import { collect } from './events-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:join-repeat', version: '1.0.0' }
const TASK = 'task-join-repeat'
/** Tail rounds watched while the executor repeats its SUBSCRIBE after each. */
const ROUNDS = 4

interface Router { sendSubscriptions: (peer: string, topics: string[], subscribe: boolean) => void }

describe('a participant that repeats its SUBSCRIBE', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async () => ({ done: true }))
    await B.publishCard({ name: 'join-repeat', capabilities: [WORK] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('opens no new quiet watch, and the tail\'s rounds slow down', async () => {
    const topic = correlationTopic(TASK)
    const onA = await collect(A, TASK, { owner: A.agentId, participants: [C.agentId] })
    const r = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    await onA.until(es => es.some(e => e.run_id === r.run_id && e.type === 'run.completed'), 'the run\'s end at the owner')
    const t = (A.events as unknown as { correlations: { get: (id: string) => CorrTrack | undefined } }).correlations.get(TASK)!
    await until(() => t.quietUntil > 0 && !t.wasLive, 'the quiet watch after the run\'s end')
    let heard = 0
    const onChange = (evt: CustomEvent<SubscriptionChangeData>): void => {
      if (evt.detail.peerId.equals(B.host.peerId) && evt.detail.subscriptions.some(s => s.subscribe && s.topic === topic)) heard++
    }
    A.host.services.pubsub.addEventListener('subscription-change', onChange)
    const router = B.host.services.pubsub as unknown as Router
    const ends: number[] = []
    for (let i = 0; i < ROUNDS; i++) {
      // after each tail round the owner makes, the executor (on the topic all along) sends its SUBSCRIBE again
      const syncs = A.events.stats.syncRequests.correlation
      await until(() => A.events.stats.syncRequests.correlation > syncs, `tail round ${i + 1}`)
      const before = heard
      router.sendSubscriptions(A.host.peerId.toString(), [topic], true)
      await until(() => heard > before, `the repeated SUBSCRIBE ${i + 1} at the owner`)
      ends.push(t.quietUntil)
    }
    A.host.services.pubsub.removeEventListener('subscription-change', onChange)
    // the first may be a join (the executor left the topic with its run): it opens one watch, the repeats none.
    // Before: each repeat moved the watch's end on and put the delay back to EVENTS_TAIL_SYNC_MIN_MS
    expect(ends).toEqual(ends.map(() => ends[0]))
    expect(t.tailDelay).toBeGreaterThan(EVENTS_TAIL_SYNC_MIN_MS)
    onA.sub.close()
  })
})
