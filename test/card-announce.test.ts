/**
 * A card published before the node has any peer (the first node of a mesh, or
 * one that publishes right after dialing its bootstrap) must still reach the
 * DHT, without waiting for the republish interval.
 */
import { afterAll, describe, expect, it, vi } from 'vitest'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { DHT_K, DHT_PROTOCOL, DHT_PROVIDER_VALIDITY_MS, DHT_REPROVIDE_CHECK_INTERVAL_MS, DHT_REPROVIDE_THRESHOLD_MS } from '../src/constants.ts'
import { until, waitForRouting } from './helpers.ts'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { Announcer } from '../src/card/announce.ts'
import { issueCard } from '../src/card/card.ts'
import type { CardOrigin } from '../src/card/discovery.ts'
import { newDiscoveryStats } from '../src/card/discovery-stats.ts'
import { routingTableOf } from '../src/card/routing-view.ts'
import { componentLogger } from '../src/logger.ts'

// the cases count where cards came from (holders, agents, the DHT): a holder's answer by key that a busy machine
// delayed past CARD_HELD_ASK_TIMEOUT_MS (500 ms) sent the discover to the agents instead. No case here is about
// that limit
vi.mock('../src/constants.ts', async (orig) => ({ ...(await orig<typeof import('../src/constants.ts')>()), CARD_HELD_ASK_TIMEOUT_MS: 10_000 }))

let memCounter = 0
const cap = { capability_id: 'cap:first', version: '1.0.0' }

describe('announcing a card published before the node had any peer', () => {
  const nodes: MeshNode[] = []
  async function node (): Promise<MeshNode> {
    const n = await createMeshNode({ listen: [`/memory/aap-card-announce-${process.pid}-${memCounter++}`], localMesh: true })
    await n.start()
    nodes.push(n)
    return n
  }
  afterAll(async () => { await Promise.all(nodes.map(async n => n.stop())) })

  it('is announced when the first peer arrives, and stays findable through the DHT after its agent leaves', async () => {
    const first = await node()
    const card = await first.publishCard({ name: 'first', capabilities: [cap] })
    // alone, there is nobody to tell: an announcement bounded by the caller reaches no one
    const controller = new AbortController()
    const alone = first.discovery.announce(controller.signal)
    controller.abort()
    expect(await alone).toBe(0)
    expect(first.discovery.stats.announcements).toBe(0)

    const second = await node()
    expect(await second.join(first.addresses)).toBe(1)
    // no event says "provider records stored on a peer", so watch the counter
    await until(() => first.discovery.stats.announcements >= 1, 'the card to be announced to the first peer')

    // `second` keeps the provider record, and the card it asked `first` for then
    await until(() => second.discovery.stats.heldCardPulls >= 1, 'the holder to pull the provider\'s card')

    // with the agent gone, a newcomer that only knows `second` still finds the card through the DHT record.
    // `second` sends the card it holds, but nobody else names the agent: a holder's word alone is not enough
    // (fetch-order.ts fromHolder), so the agent is asked, is gone, and the DHT record is the answer
    await first.stop()
    const third = await node()
    expect(await third.join(second.addresses)).toBe(1)
    await waitForRouting([second, third], 1)
    const origins: CardOrigin[] = []
    expect(await third.discover({ capability: cap }, { explain: (o) => { origins.push(o) } })).toEqual([card])
    expect(origins.map(o => [o.agent_id, o.source])).toEqual([[card.agent_id, 'dht']])
    expect(third.discovery.stats.heldCardsReceived).toBe(1)
    expect(third.discovery.stats.heldCardsUnbacked).toBe(1)
    expect(third.discovery.stats.dhtFallbacks).toBe(1)
    // and from the DHT record again when asked for a fresh one
    expect(await third.discovery.getCard(card.agent_id, { fresh: true })).toEqual(card)
    expect(third.discovery.stats.dhtFallbacks).toBe(2)
  })

  it('publish with announce: false serves the card at once and leaves the DHT side to the caller', async () => {
    const a = await node()
    const b = await node()
    expect(await b.join(a.addresses)).toBe(1)
    await waitForRouting([a, b], 1)
    const quiet = { capability_id: 'cap:quiet', version: '1.0.0' }
    const card = await a.discovery.publish({ name: 'quiet', capabilities: [quiet] }, { announce: false })
    // by id, straight from the agent: no DHT needed
    expect(await b.getCard(a.agentId, { fresh: true })).toEqual(card)
    // not announced: nobody provides the capability yet
    expect(await b.discover({ capability: quiet })).toEqual([])
    expect(a.discovery.stats.announcements).toBe(0)
    // the caller's own announcement makes it findable
    expect(await a.discovery.announce()).toBeGreaterThan(0)
    expect(await b.discover({ capability: quiet })).toEqual([card])
  })

  it('announces each provider key once: a republished card costs no provider walk, a changed one each of its keys once', async () => {
    const a = await node()
    const b = await node()
    const c = await node()
    expect(await b.join(a.addresses)).toBe(1)
    expect(await c.join(a.addresses)).toBe(1)
    await waitForRouting([a, b, c], 2)
    const x1 = { capability_id: 'cap:once-x', version: '1.0.0' }
    const x2 = { capability_id: 'cap:once-x', version: '2.0.0' }
    const y = { capability_id: 'cap:once-y', version: '1.0.0' }
    const z = { capability_id: 'cap:once-z', version: '1.0.0' }
    const stats = a.discovery.stats

    await a.discovery.publish({ name: 'once', capabilities: [x1, y], tags: ['once'] }, { announce: false })
    // x, y and the tag: one walk each
    expect(await a.discovery.announce()).toBe(3)
    expect(stats.providerWalks).toBe(3)
    // the same keys again (what the republish timer does): the card record is put, no key is announced again
    const same = await a.discovery.publish({ name: 'once', capabilities: [x1, y], tags: ['once'] }, { announce: false })
    expect(await a.discovery.announce()).toBe(3)
    expect(stats.providerWalks).toBe(3)
    expect(await c.discover({ capability: x1 }, { fresh: true })).toEqual([same])

    // b serves x@1 as well; a moves to x@2 and z and drops y
    const bCard = await b.discovery.publish({ name: 'b', capabilities: [x1] }, { announce: false })
    expect(await b.discovery.announce()).toBe(1)
    const moved = await a.discovery.publish({ name: 'once', capabilities: [x2, z], tags: ['once'] }, { announce: false })
    expect(await a.discovery.announce()).toBe(3)
    // the card says something new: each key it names is walked once (its holders pull it: card-changed-draft-rewalk.test.ts)
    expect(stats.providerWalks).toBe(6)
    expect(stats.withdrawnKeys).toBe(1)
    // both versions share one key; each query keeps the cards that declare its version
    expect(await c.discover({ capability: x1 }, { fresh: true })).toEqual([bCard])
    expect(await c.discover({ capability: x2 }, { fresh: true })).toEqual([moved])
    expect((await c.discover({ capability: { capability_id: x1.capability_id } }, { fresh: true })).map(k => k.agent_id).sort())
      .toEqual([a.agentId, b.agentId].sort())
    expect(await c.discover({ capability: z }, { fresh: true })).toEqual([moved])
    // y's record on peers outlives the withdrawal (it expires by itself), but the card found there no longer declares y
    expect(await c.discover({ capability: y }, { fresh: true })).toEqual([])
  })

  it('counts a key as announced by the ADD_PROVIDER records it sent: a walk that sent none is walked again, one that sent them is not', async () => {
    const a = await node()
    const b = await node()
    const c = await node()
    expect(await b.join(a.addresses)).toBe(1)
    expect(await c.join(a.addresses)).toBe(1)
    await waitForRouting([a, b, c], 2)
    const short = { capability_id: 'cap:short', version: '1.0.0' }
    const stats = a.discovery.stats
    const card = await a.discovery.publish({ name: 'short', capabilities: [short] }, { announce: false })
    // the walk's time is up before it starts: peers are there, but no record goes out
    expect(await a.discovery.announce(AbortSignal.abort())).toBe(0)
    await until(() => stats.shortProviderWalks >= 1, 'the cut-short walk to end')
    expect(stats.providerRecordsSent).toBe(0)
    expect(stats.providerWalks).toBe(1)
    // the next announcement walks that key again, and this time its records reach both peers
    expect(await a.discovery.announce()).toBe(1)
    expect(stats.providerWalks).toBe(2)
    expect(stats.providerRecordsSent).toBe(2)
    expect(stats.shortProviderWalks).toBe(1)
    expect(await c.discover({ capability: short }, { fresh: true })).toEqual([card])
    // out now: announcing again walks nothing
    expect(await a.discovery.announce()).toBe(1)
    expect(stats.providerWalks).toBe(2)
    expect(stats.announceRetries).toBe(0)
  })

  it('walks a short key again by itself after the retry wait, and stops once its records are out', async () => {
    const key = await generateKeyPair('Ed25519')
    const a = await createMeshNode({ privateKey: key, listen: [`/memory/aap-card-announce-${process.pid}-${memCounter++}`], localMesh: true })
    await a.start()
    nodes.push(a)
    const b = await node()
    expect(await b.join(a.addresses)).toBe(1)
    await waitForRouting([a, b], 1)
    const card = await issueCard(key, { name: 'retried', capabilities: [{ capability_id: 'cap:retried', version: '1.0.0' }] }, Date.now())
    const stats = newDiscoveryStats()
    const announcer = new Announcer({ host: a.host, stats, log: componentLogger(undefined, 'test'), routing: routingTableOf(a.host.services.dht), card: () => card, retryMs: 20 })
    try {
      expect(await announcer.announce(AbortSignal.abort())).toBe(0)
      expect(announcer.pending).toBe(true)
      await until(() => stats.announceRetries >= 1 && stats.providerRecordsSent >= 1, 'the retry to send the record')
      expect(stats.shortProviderWalks).toBe(1)
      // out now: the next announcement walks nothing, and no retry is pending
      expect(await announcer.announce()).toBe(1)
      expect(stats.providerWalks).toBe(2)
      expect(stats.announceRetries).toBe(1)
      expect(announcer.pending).toBe(false)
    } finally {
      announcer.stop()
    }
  })

  it('counts a key as out once its records reached half of kad-dht\'s k, when k is smaller than ANNOUNCE_MIN_PROVIDER_RECORDS', async () => {
    // kad-dht sends a provider record to at most k peers: with k 4 (under ANNOUNCE_MIN_PROVIDER_RECORDS, and under this
    // mesh's five other peers) a key that had to reach the routing table's size could never be out
    const a = await createMeshNode({ listen: [`/memory/aap-card-announce-${process.pid}-${memCounter++}`], localMesh: true, dht: { k: 4, alpha: 2, disjointPaths: 1 } })
    await a.start()
    nodes.push(a)
    const others = [await node(), await node(), await node(), await node(), await node()]
    for (const o of others) expect(await o.join(a.addresses)).toBe(1)
    await until(async () => (await a.host.peerStore.all()).filter(p => p.protocols.includes(DHT_PROTOCOL)).length === 5, 'a to know its five peers')
    const stats = a.discovery.stats
    await a.discovery.publish({ name: 'small-k', capabilities: [{ capability_id: 'cap:small-k', version: '1.0.0' }] }, { announce: false })
    expect(await a.discovery.announce()).toBe(1)
    expect(stats.providerRecordsSent).toBeGreaterThanOrEqual(2)
    expect(stats.providerRecordsSent).toBeLessThanOrEqual(4)
    expect(stats.shortProviderWalks).toBe(0)
    expect(a.discovery.announcing).toBe(false)
  })

  it('kad-dht keeps announced keys alive and drops others\' records on the validity the constants name', async () => {
    const n = await node()
    const reprovider = Reflect.get(n.host.services.dht, 'reprovider') as { validity: number, reprovideThreshold: number, interval: number }
    expect(reprovider.validity).toBe(DHT_PROVIDER_VALIDITY_MS)
    expect(reprovider.reprovideThreshold).toBe(DHT_REPROVIDE_THRESHOLD_MS)
    expect(reprovider.interval).toBe(DHT_REPROVIDE_CHECK_INTERVAL_MS)
    expect(DHT_REPROVIDE_THRESHOLD_MS).toBeLessThan(DHT_PROVIDER_VALIDITY_MS)
  })

  it('a node takes its Kademlia parameters from its options, and kad-dht\'s defaults (DHT_K) otherwise', async () => {
    const tuned = await createMeshNode({ listen: [`/memory/aap-card-announce-${process.pid}-${memCounter++}`], localMesh: true, dht: { k: 7, alpha: 2, disjointPaths: 1 } })
    await tuned.start()
    nodes.push(tuned)
    const table = (dht: object): { kBucketSize: number } => Reflect.get(dht, 'routingTable') as { kBucketSize: number }
    expect(table(tuned.host.services.dht).kBucketSize).toBe(7)
    const plain = await node()
    expect(table(plain.host.services.dht).kBucketSize).toBe(DHT_K)
  })
})
