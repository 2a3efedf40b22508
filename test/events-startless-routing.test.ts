/**
 * Startless events a stranger signs each under a fresh key (events past seq 1
 * of a run no one vouched for) cost no peer routing: their run is asked of its
 * executor only when a dial needs no routing, else of the peer that relayed
 * the message, a few at a time (EVENTS_STARTLESS_FETCHES_PER_SOURCE), the rest
 * not fetched (startlessDropped). Before, each was fetched from its executor, a
 * key no node holds: the dial walked the DHT for it (findPeer), once per
 * message, each walk holding a sync slot. Found by session 57's review.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_LOCK_WAITING_MAX, EVENTS_STARTLESS_FETCHES_PER_SOURCE } from '../src/events/constants.ts'
import type { ShedFetches } from '../src/events/shed.ts'
import { correlationTopic } from '../src/events/topic.ts'
import type { CorrTrack } from '../src/events/track.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { newRunId, signEvent } from '../src/runlog/event.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const TASK = 'task-startless-routing'
/** Events the relayer publishes, each signed by a fresh key. */
const FLOOD = 40
const enc = new TextEncoder()

describe('startless events under fresh keys', () => {
  let nodes: MeshNode[] = []
  let F: MeshNode, H: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[F, H] = nodes as [MeshNode, MeshNode]
  })
  afterAll(async () => { await stopAll(nodes) })

  it('cost no peer routing walk', async () => {
    const topic = correlationTopic(TASK)
    const sub = await F.events.subscribe(TASK)
    await until(() => H.host.services.pubsub.getSubscribers(topic).some(p => p.equals(F.host.peerId)), 'the relayer to see the follower')
    const t = (F.events as unknown as { correlations: { get: (id: string) => CorrTrack | undefined } }).correlations.get(TASK)!
    await until(() => t.inflight.size === 0, 'the first syncs')
    const routing = F.host.peerRouting
    const findPeer = routing.findPeer.bind(routing)
    let walks = 0
    routing.findPeer = async (...args) => {
      walks++
      return findPeer(...args)
    }
    const judged = F.events.stats.gossip.unknown_run
    for (let i = 0; i < FLOOD; i++) {
      const key = await generateKeyPair('Ed25519')
      const executor = agentIdOf(key)
      const e = await signEvent(key, {
        run_id: newRunId(executor), correlation_id: TASK, type: 'run.progress', payload: { n: i },
        at: new Date().toISOString(), seq: 2, prev: 'a'.repeat(64), executor
      })
      await H.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(e)))
    }
    await until(() => F.events.stats.gossip.unknown_run >= judged + FLOOD, 'the flood judged')
    await until(() => t.inflight.size === 0, 'the flood\'s fetches to end', 60_000)
    routing.findPeer = findPeer
    // before: one findPeer (a DHT walk) per event, 40 and more
    expect(walks).toBe(0)
    sub.close()
  })

  it('cost no peer routing walk when their gossip is shed behind the lock', async () => {
    const task = `${TASK}-shed`
    const topic = correlationTopic(task)
    const sub = await F.events.subscribe(task)
    await until(() => H.host.services.pubsub.getSubscribers(topic).some(p => p.equals(F.host.peerId)), 'the relayer to see the follower')
    const t = (F.events as unknown as { correlations: { get: (id: string) => CorrTrack | undefined } }).correlations.get(task)!
    await until(() => t.inflight.size === 0, 'the first syncs')
    const placement = (F.events as unknown as { placement: { shedFetches: ShedFetches } }).placement
    // the correlation's lock is behind: gossip is shed, its runs fetched once it drains (shed.ts)
    let release!: () => void
    const blocker = new Promise<void>(resolve => { release = resolve })
    const held: Array<Promise<unknown>> = [t.lock.run(async () => blocker)]
    for (let i = 0; i < EVENTS_LOCK_WAITING_MAX; i++) held.push(t.lock.run(async () => {}))
    await until(() => t.lock.waiting >= EVENTS_LOCK_WAITING_MAX, 'the lock behind')
    const routing = F.host.peerRouting
    const findPeer = routing.findPeer.bind(routing)
    let walks = 0
    routing.findPeer = async (...args) => {
      walks++
      return findPeer(...args)
    }
    const shed = F.events.stats.lockShed
    const dropped = F.events.stats.startlessDropped
    for (let i = 0; i < FLOOD; i++) {
      const key = await generateKeyPair('Ed25519')
      const executor = agentIdOf(key)
      const e = await signEvent(key, {
        run_id: newRunId(executor), correlation_id: task, type: 'run.progress', payload: { n: i },
        at: new Date().toISOString(), seq: 2, prev: 'a'.repeat(64), executor
      })
      await H.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(e)))
    }
    await until(() => F.events.stats.lockShed >= shed + FLOOD, 'the flood shed')
    release()
    await Promise.allSettled(held)
    await t.lock.idle()
    // the wait ends as the lock drains, its fetches made at once
    await until(() => placement.shedFetches.armed(t) === 0, 'the shed runs\' fetches to be made')
    await until(() => t.inflight.size === 0, 'the shed runs\' fetches to end', 60_000)
    routing.findPeer = findPeer
    // before: each shed run was fetched from its executor once the lock drained, a DHT walk each (80 findPeer calls)
    expect(walks).toBe(0)
    // a few fetched by the relayer's share, the rest not fetched (counted)
    expect(F.events.stats.startlessDropped - dropped).toBeGreaterThanOrEqual(FLOOD - EVENTS_STARTLESS_FETCHES_PER_SOURCE)
    sub.close()
  })
})
