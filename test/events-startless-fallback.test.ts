/**
 * A gossiped startless run (events past seq 1 of a run no one vouched for) is
 * asked of the peer that relayed its event when its executor needs peer
 * routing to reach (startless.ts); when that relayer has nothing for it, its
 * executor is asked next if by then it is reached without routing. Before,
 * the relayer was the only one ever asked: its empty answer ended the fetch,
 * though the executor was connected. Found by session 57's review.
 */
import type { PeerId } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { multiaddr } from '@multiformats/multiaddr'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { correlationTopic } from '../src/events/topic.ts'
import type { CorrTrack } from '../src/events/track.ts'
import type { MeshNode } from '../src/node.ts'
import { newRunId, signEvent } from '../src/runlog/event.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

const TASK = 'task-startless-fallback'
const enc = new TextEncoder()

type RunCall = (peer: PeerId, ...rest: unknown[]) => Promise<unknown>

describe('a startless run whose relayer holds nothing for it', () => {
  let nodes: MeshNode[] = []
  let F: MeshNode, H: MeshNode, E: MeshNode
  let key: Awaited<ReturnType<typeof generateKeyPair>>

  beforeAll(async () => {
    key = await generateKeyPair('Ed25519')
    ;[F, H] = await startLoneNodes(2) as [MeshNode, MeshNode]
    ;[E] = await startLoneNodes(1, { privateKey: key }) as [MeshNode]
    nodes = [F, H, E]
    await F.join(H.addresses)
  })
  afterAll(async () => { await stopAll(nodes) })

  it('is asked of its executor once that one is connected', async () => {
    const topic = correlationTopic(TASK)
    const sub = await F.events.subscribe(TASK)
    await until(() => H.host.services.pubsub.getSubscribers(topic).some(p => p.equals(F.host.peerId)), 'the relayer to see the follower')
    const t = (F.events as unknown as { correlations: { get: (id: string) => CorrTrack | undefined } }).correlations.get(TASK)!
    await until(() => t.inflight.size === 0, 'the first syncs')
    // F knows no address of the executor: the run is asked of the relayer, and the executor connects meanwhile
    expect(await F.host.peerStore.has(E.host.peerId)).toBe(false)
    const client = (F.events as unknown as { sync: { run: RunCall } }).sync
    const run = client.run.bind(client)
    const asked: string[] = []
    client.run = async (peer, ...rest) => {
      asked.push(peer.toString())
      if (peer.equals(H.host.peerId)) await F.host.dial(multiaddr(E.addresses[0]!))
      return run(peer, ...rest)
    }
    const executor = E.agentId
    const e = await signEvent(key, {
      run_id: newRunId(executor), correlation_id: TASK, type: 'run.progress', payload: { n: 1 },
      at: new Date().toISOString(), seq: 2, prev: 'a'.repeat(64), executor
    })
    const judged = F.events.stats.gossip.unknown_run
    await H.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(e)))
    await until(() => F.events.stats.gossip.unknown_run > judged, 'the event judged')
    await until(() => asked.length > 0 && t.inflight.size === 0, 'the run\'s fetch to end')
    client.run = run
    expect(asked[0]).toBe(H.agentId)
    // before: only the relayer was asked
    expect(asked).toContain(E.agentId)
    sub.close()
  })
})
