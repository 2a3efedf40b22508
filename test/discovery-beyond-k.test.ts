/**
 * A capability that more agents offer than the DHT's k: kad-dht's provider
 * lookup stops once it named k providers, so discover found a fixed few
 * whatever limit the caller gave. The lookup now goes on to this node's own
 * records and the key's closest peers (src/wire/dht-providers.ts) until the
 * caller has its limit.
 *
 * Real nodes and real provider records; where a test needs the records spread
 * in a particular way, it writes them into the nodes' provider stores as an
 * ADD_PROVIDER would: the record, and the provider's addresses in the
 * holder's peer store.
 */
import type { PeerId, Stream } from '@libp2p/interface'
import type { CID } from 'multiformats/cid'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityKey, type AgentCard } from '../src/card/card.ts'
import type { DiscoveryStats } from '../src/card/discovery-stats.ts'
import { DHT_PROTOCOL, DHT_PROVIDERS_PER_ANSWER } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { componentLogger } from '../src/logger.ts'
import { lookupProviders } from '../src/wire/dht-providers.ts'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { newKey } from './card-fixtures.ts'
import { startMesh, stopAll } from './helpers.ts'
import { BUDGET_MS, holdersOf, ownConnectionsOnlyTo, storeOf } from './fixtures/dht-records.ts'

const log = componentLogger(undefined, 'test')

const K = 3
const NODES = 10
const OFFERING = 7
const cap = { capability_id: 'cap:widely-offered', version: '1.0.0' }

/** A discover of `cap` (no cache) by `asker`, and what it added to each discovery counter. */
async function discoverCounting (asker: MeshNode, limit: number): Promise<{ found: AgentCard[], added: (k: keyof DiscoveryStats) => number }> {
  const before = { ...asker.discovery.stats }
  // the lookup alone: no ask by key to the first contact, whose cards would end the discover before its answer
  const found = await asker.discover({ capability: cap }, { timeoutMs: BUDGET_MS, limit, cache: false, byKey: false })
  return { found, added: (k) => asker.discovery.stats[k] - before[k] }
}

/** Leave `asker` with one connection to each of `peers`, opened by itself (what the connected round asks). */
async function connectFrom (asker: MeshNode, peers: PeerId[]): Promise<void> {
  for (const peer of peers) {
    await asker.host.hangUp(peer)
    await asker.host.dial(peer)
    expect(asker.host.getConnections(peer).map(c => c.direction)).toEqual(['outbound'])
  }
}

describe(`discover past the DHT's k (k = ${K}, ${OFFERING} agents offer the capability)`, () => {
  let nodes: MeshNode[] = []
  let offering: PeerId[] = []
  beforeAll(async () => {
    nodes = await startMesh(NODES, { nodeOptions: () => ({ dht: { k: K, alpha: K, disjointPaths: 1 } }) })
    for (const n of nodes.slice(0, OFFERING)) {
      await n.publishCard({ name: 'wide', description: 'one of many', capabilities: [cap], tags: ['wide'] })
      expect(await n.discovery.announce()).toBeGreaterThan(0)
    }
    offering = nodes.slice(0, OFFERING).map(n => peerIdOfAgent(n.agentId))
  })
  afterAll(async () => { await stopAll(nodes) })

  const offeringIds = (): string[] => nodes.slice(0, OFFERING).map(n => n.agentId).sort()
  const nodeOf = (peer: PeerId): MeshNode => nodes.find(n => peerIdOfAgent(n.agentId).equals(peer))!
  /** Leave no record of `key` on any node but `parts[i]` on `holders[i]`, each written as an ADD_PROVIDER from it would. */
  async function placeRecords (key: CID, holders: PeerId[], parts: PeerId[][]): Promise<void> {
    for (const n of nodes) for (const p of offering) await storeOf(n).removeProvider(key, p)
    for (const [i, holder] of holders.entries()) {
      const node = nodeOf(holder)
      for (const p of parts[i] ?? []) {
        // the record, and p's addresses in the holder's peer store
        await storeOf(node).addProvider(key, p)
        await node.host.peerStore.merge(p, { multiaddrs: nodeOf(p).host.getMultiaddrs() })
      }
    }
  }

  it('finds every one when the key\'s holders each hold only some of the records', async () => {
    const key = await capabilityKey(cap.capability_id)
    const asker = nodes[NODES - 1]!
    const holders = await holdersOf(nodes, asker, key, K)
    expect(holders).toHaveLength(K)
    // no node holds a record of the key any more, except these parts: 3 + 2 + 2 of the 7
    await placeRecords(key, holders, [offering.slice(0, 3), offering.slice(3, 5), offering.slice(5)])
    // kad-dht's lookup stops at k: any two parts already make 4 or more, so it never saw all 7. The asker holds
    // no connection of its own to anyone, so the lookup has no connected round: it walks, then sweeps
    for (const holder of holders) await asker.host.hangUp(holder)
    await ownConnectionsOnlyTo(asker, [])
    const before = { ...asker.discovery.stats }
    const found = await asker.discover({ capability: cap }, { timeoutMs: BUDGET_MS, fresh: true })
    expect(found.map(c => c.agent_id).sort()).toEqual(offeringIds())
    expect(asker.discovery.stats.providerSweeps).toBe(before.providerSweeps + 1)
    expect(asker.discovery.stats.lookupWalks).toBe(before.lookupWalks + 1)
    expect(asker.discovery.stats.connectedAnswers).toBe(before.connectedAnswers)
  })

  it('asks the closest contacts it is connected to first, and walks no further when they name enough', async () => {
    // the records are where the first test left them: 3 + 2 + 2 over the key's k closest peers
    const key = await capabilityKey(cap.capability_id)
    const asker = nodes[NODES - 1]!
    const holders = await holdersOf(nodes, asker, key, K)
    await connectFrom(asker, holders)
    let dials = 0
    const onOpen = (evt: CustomEvent<{ direction: string }>): void => { if (evt.detail.direction === 'outbound') dials++ }
    asker.host.addEventListener('connection:open', onOpen)
    try {
      // each holder names its own part; two providers with cards are enough for a limit of 2
      const { found, added } = await discoverCounting(asker, 2)
      expect(found).toHaveLength(2)
      expect(added('lookupWalks')).toBe(0)
      expect(added('connectedAnswers')).toBeGreaterThan(0)
      expect(added('connectedAnswers')).toBe(added('lookupAnswers'))
      // asked one at a time: the discover may end on the first holder's part (2 or 3 providers, limit 2)
      // before the next holder answers
      expect(added('lookupProviders')).toBeGreaterThanOrEqual(2)
      // no contact dialed for the lookup; the cards came from holders or agents it was connected to
      expect(dials).toBe(0)
    } finally {
      asker.host.removeEventListener('connection:open', onOpen)
    }
  })

  it('asks its connected contacts one at a time: one whose answer names enough is the only one asked', async () => {
    const key = await capabilityKey(cap.capability_id)
    const asker = nodes[NODES - 1]!
    await connectFrom(asker, await holdersOf(nodes, asker, key, K))
    // every holder names at least 2 providers, as many as a limit of 1 wants (twice the limit)
    const { found, added } = await discoverCounting(asker, 1)
    expect(found).toHaveLength(1)
    expect(added('lookupWalks')).toBe(0)
    expect(added('connectedAnswers')).toBe(1)
    // before, all three were asked at once, and two answers were read for nothing; a second ask here only hedges a
    // first contact slower than DHT_CONNECTED_HEDGE_MS
    expect(added('connectedAsks') - added('connectedHedges')).toBe(1)
  })

  it('finds every one when this node holds the records itself (kad-dht hands out only k of its own)', async () => {
    const key = await capabilityKey(cap.capability_id)
    const asker = nodes[OFFERING]!
    for (const p of offering) await storeOf(asker).addProvider(key, p)
    // with no connection, the connected round asks no holder (whose 3 + 2 + 2 would name all 7 before the
    // sweep); kad-dht's walk then hands out k of the asker's own records and ends, and the sweep names the rest
    await Promise.all(asker.host.getConnections().map(async c => { await c.close() }))
    const before = { ...asker.discovery.stats }
    const found = await asker.discover({ capability: cap }, { timeoutMs: BUDGET_MS, fresh: true })
    expect(found.map(c => c.agent_id).sort()).toEqual(offeringIds())
    expect(asker.discovery.stats.connectedAnswers).toBe(before.connectedAnswers)
    expect(asker.discovery.stats.providerSweeps).toBe(before.providerSweeps + 1)
    expect(asker.discovery.stats.sweptProviders - before.sweptProviders).toBe(OFFERING - K)
  })

  it('does not sweep when the caller asks for no more than the lookup named', async () => {
    const n = nodes[OFFERING + 1]!
    const before = n.discovery.stats.providerSweeps
    const found = await n.discover({ tags: ['wide'] }, { timeoutMs: BUDGET_MS, limit: 1 })
    expect(found).toHaveLength(1)
    expect(n.discovery.stats.providerSweeps).toBe(before)
  })

  it('does not ask first a contact that connected to it: a peer buys no rank by connecting', async () => {
    const key = await capabilityKey(cap.capability_id)
    const asker = nodes[NODES - 1]!
    const holders = await holdersOf(nodes, asker, key, K)
    // every holder connected to the asker, none by the asker
    for (const holder of holders) {
      await asker.host.hangUp(holder)
      const node = nodes.find(n => peerIdOfAgent(n.agentId).equals(holder))!
      await node.host.dial(peerIdOfAgent(asker.agentId))
      expect(asker.host.getConnections(holder).map(c => c.direction)).toEqual(['inbound'])
    }
    // and none of the asker's own to anyone: only a connection it opened is asked
    await ownConnectionsOnlyTo(asker, [])
    const before = { ...asker.discovery.stats }
    const found = await asker.discover({ capability: cap }, { timeoutMs: BUDGET_MS, limit: 2, cache: false })
    expect(found).toHaveLength(2)
    expect(asker.discovery.stats.connectedAnswers - before.connectedAnswers).toBe(0)
    expect(asker.discovery.stats.lookupWalks - before.lookupWalks).toBe(1)
  })

  it('a provider past one peer\'s share is still named by the next peer that names it', async () => {
    const key = await capabilityKey(cap.capability_id)
    const asker = nodes[NODES - 1]!
    const holders = await holdersOf(nodes, asker, key, K)
    expect(holders).toHaveLength(K)
    // every holder holds all 7 records; with a share of 3 per peer, the first answer names 3 and leaves 4 out.
    // Before session 39 those 4 counted as named, so the other holders' answers named nobody new
    await placeRecords(key, holders, holders.map(() => offering))
    try {
      for (const holder of holders) await asker.host.hangUp(holder)
      const all = new Set<string>()
      const byPeer = new Map<string, number>()
      let dropped = 0
      for await (const ev of lookupProviders(asker.host.services.dht, asker.host.peerId, key, { want: 100, signal: AbortSignal.timeout(10_000), log, perPeerMax: 3 })) {
        if (ev.name === 'over_share') dropped += ev.providers
        if (ev.name !== 'providers') continue
        for (const p of ev.providers) all.add(p.toString())
        const from = ev.from?.toString() ?? 'own records'
        byPeer.set(from, (byPeer.get(from) ?? 0) + ev.providers.length)
      }
      expect([...all].sort()).toEqual(offeringIds())
      expect(dropped).toBeGreaterThan(0)
      expect(Math.max(...byPeer.values())).toBeLessThanOrEqual(3)
    } finally {
      // as the tests after this one expect them: 3 + 2 + 2
      await placeRecords(key, holders, [offering.slice(0, 3), offering.slice(3, 5), offering.slice(5)])
    }
  })

  it('asks a holder again while its answers are full picks of what it holds: each names a fresh pick', async () => {
    const key = await capabilityKey(cap.capability_id)
    const asker = nodes[NODES - 1]!
    const holders = await holdersOf(nodes, asker, key, K)
    // one holder holds twice as many records as an answer names, the others none; no share (the discover's is 20)
    const many = await Promise.all(Array.from({ length: 2 * DHT_PROVIDERS_PER_ANSWER }, async () => peerIdFromPrivateKey(await newKey())))
    const holder = nodeOf(holders[0]!)
    await placeRecords(key, holders, [])
    for (const [i, p] of many.entries()) {
      await storeOf(holder).addProvider(key, p)
      // an answer names only providers its peer store has addresses for; the lookup dials none of them
      await holder.host.peerStore.merge(p, { multiaddrs: [multiaddr(`/ip4/127.0.0.1/tcp/${10_000 + i}`)] })
    }
    try {
      const named = new Set<string>()
      let answers = 0
      for await (const ev of lookupProviders(asker.host.services.dht, asker.host.peerId, key, { want: 100, signal: AbortSignal.timeout(10_000), log })) {
        if (ev.name === 'answer' && ev.from.equals(holders[0]!)) answers++
        if (ev.name === 'providers') for (const p of ev.providers) named.add(p.toString())
      }
      // its first answer names 20 of the 40; asked again, it names a fresh 20 (that they are all among the first 20
      // has a chance of 1 in C(40, 20), about 1e-11)
      expect(answers).toBeGreaterThanOrEqual(2)
      expect(named.size).toBeGreaterThan(DHT_PROVIDERS_PER_ANSWER)
      for (const p of named) expect(many.some(m => m.toString() === p)).toBe(true)
    } finally {
      for (const p of many) await storeOf(holder).removeProvider(key, p)
      await placeRecords(key, holders, [offering.slice(0, 3), offering.slice(3, 5), offering.slice(5)])
    }
  })

  // last: it leaves one holder deaf to the DHT
  it('a connected contact that never answers does not hold the lookup up: the others\' answers end the round', async () => {
    const key = await capabilityKey(cap.capability_id)
    const asker = nodes[NODES - 1]!
    const holders = await holdersOf(nodes, asker, key, K)
    expect(holders).toHaveLength(K)
    // the holder of the 3-record part reads a GET_PROVIDERS and never answers; the other two name 2 + 2
    const silent = nodes.find(n => peerIdOfAgent(n.agentId).equals(holders[0]!))!
    const held: Stream[] = []
    await silent.host.handle(DHT_PROTOCOL, (stream) => { held.push(stream) }, { force: true })
    await connectFrom(asker, holders)
    const before = { ...asker.discovery.stats }
    const found = await asker.discover({ capability: cap }, { timeoutMs: BUDGET_MS, limit: 2, cache: false, byKey: false })
    expect(found).toHaveLength(2)
    expect(held.length).toBeGreaterThan(0)
    expect(asker.discovery.stats.lookupWalks - before.lookupWalks).toBe(0)
    // the first answer names the limit, and the discover may end on its two cards before the second answer comes;
    // the silent holder's answer never counts
    const answered = asker.discovery.stats.connectedAnswers - before.connectedAnswers
    expect(answered).toBeGreaterThanOrEqual(1)
    expect(answered).toBeLessThanOrEqual(2)

    // a caller that stops while the connected round is still out (a discover that had its cards from the
    // contact's answer by key) ends the lookup with that round's last ask: no walk, so no dial. Only the
    // silent holder is asked here.
    const stop = new AbortController()
    const events: string[] = []
    for await (const ev of lookupProviders(asker.host.services.dht, asker.host.peerId, key, {
      want: 4, signal: stop.signal, log, connected: p => p.equals(holders[0]!), onConnectedAsk: () => { queueMicrotask(() => { stop.abort() }) }
    })) events.push(ev.name)
    expect(stop.signal.aborted).toBe(true)
    expect(events).not.toContain('walk')
  })
})

