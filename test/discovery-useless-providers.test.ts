/**
 * A provider lookup used to end once it had named twice the caller's limit,
 * whether or not those providers' cards could be had. So a contact whose
 * answer named providers that serve no matching card (a hostile holder, or
 * agents that went away or dropped the capability) left a discover empty
 * while an honest agent was a walk away. The lookup now goes on when the
 * named providers' fetches fail or their cards do not match
 * (src/wire/dht-providers.ts, `demand`).
 *
 * Real nodes; the provider records are written into the holders' stores as an
 * ADD_PROVIDER would write them (the record, and the provider's addresses in
 * the holder's peer store).
 */
import { createServer, type AddressInfo, type Socket } from 'node:net'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PeerId } from '@libp2p/interface'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import type { CID } from 'multiformats/cid'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityKey } from '../src/card/card.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { BUDGET_MS, distanceTo, holdersOf, ownConnectionsOnlyTo, peerOf, recordAt, storeOf } from './fixtures/dht-records.ts'

const K = 3
const NODES = 9
const cap = { capability_id: 'cap:few-honest', version: '1.0.0' }

describe('a discover whose first answer names only providers without a matching card', () => {
  let nodes: MeshNode[] = []
  let honest: MeshNode, other: MeshNode, cardless: MeshNode
  beforeAll(async () => {
    nodes = await startMesh(NODES, { nodeOptions: () => ({ dht: { k: K, alpha: K, disjointPaths: 1 } }) })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('goes on looking and finds the honest agent', async () => {
    const key = await capabilityKey(cap.capability_id)
    const asker = nodes[NODES - 1]!
    const holders = await holdersOf(nodes, asker, key, K)
    expect(holders).toHaveLength(K)
    const byPeer = (p: PeerId): MeshNode => nodes.find(n => peerOf(n).equals(p))!
    const others = nodes.filter(n => n !== asker && !holders.some(h => h.equals(peerOf(n))))
    if (others.length < 3) throw new Error('the mesh is too small')
    ;[honest, other, cardless] = others as [MeshNode, MeshNode, MeshNode]
    // cards served by their agents, announced by no one: the provider records are laid out by hand below. (The
    // test announced them and removed the records; an ADD_PROVIDER is one-way, and one a holder handled after the
    // removal named the honest agent in the first answer now and then)
    await honest.discovery.publish({ name: 'honest', capabilities: [cap] }, { announce: false })
    // a provider whose card does not offer the capability (it dropped it), and one with no card at all
    await other.discovery.publish({ name: 'other', capabilities: [{ capability_id: 'cap:something-else', version: '1.0.0' }] }, { announce: false })

    // the one holder the asker is connected to names only the two useless providers; the honest agent's
    // record is with the other holders, which the asker holds no connection to
    const [first, ...rest] = holders.map(byPeer)
    await recordAt(first!, key, other)
    await recordAt(first!, key, cardless)
    for (const h of rest) await recordAt(h!, key, honest)
    for (const h of holders) await asker.host.hangUp(h)
    await ownConnectionsOnlyTo(asker, [peerOf(first!)])

    const before = { ...asker.discovery.stats }
    const named: string[] = []
    const found = await asker.discover({ capability: cap }, { timeoutMs: BUDGET_MS, limit: 1, cache: false, onNamed: (ids) => { named.push(...ids) } })
    const added = (k: keyof typeof before): number => asker.discovery.stats[k] - before[k]
    expect(found.map(c => c.agent_id)).toEqual([honest.agentId])
    // the connected round named the two (want: twice the limit); the walk went on once one proved useless
    // (the other's card does not match; the cardless one's fetch may still be going when the honest card comes)
    expect(named.slice(0, 2).sort()).toEqual([other.agentId, cardless.agentId].sort())
    expect(named).toContain(honest.agentId)
    expect(added('connectedAnswers')).toBe(1)
    expect(added('lookupWalks')).toBe(1)
  })

  it('does not walk when the providers named first have matching cards', async () => {
    const key = await capabilityKey(cap.capability_id)
    const asker = nodes[NODES - 1]!
    const holders = await holdersOf(nodes, asker, key, K)
    const byPeer = (p: PeerId): MeshNode => nodes.find(n => peerOf(n).equals(p))!
    // the other agent offers the capability again, the cardless one's records are gone: every holder names two
    // agents whose cards match
    await other.publishCard({ name: 'other', capabilities: [cap] })
    expect(await other.discovery.announce()).toBeGreaterThan(0)
    await until(() => !other.discovery.announcing, 'announce done')
    for (const h of holders) {
      await storeOf(byPeer(h)).removeProvider(key, peerOf(cardless))
      await recordAt(byPeer(h), key, honest)
      await recordAt(byPeer(h), key, other)
    }
    const before = { ...asker.discovery.stats }
    const found = await asker.discover({ capability: cap }, { timeoutMs: BUDGET_MS, limit: 1, cache: false, byKey: false })
    expect(found).toHaveLength(1)
    expect(asker.discovery.stats.connectedAnswers - before.connectedAnswers).toBeGreaterThan(0)
    expect(asker.discovery.stats.lookupWalks - before.lookupWalks).toBe(0)
  })
})

describe('a discover whose first answer names many providers that never answer', () => {
  let nodes: MeshNode[] = []
  const sockets = new Set<Socket>()
  let accepted = 0
  // takes every connection and never speaks: a dial to a provider here runs out its time
  const blackhole = createServer((s) => {
    accepted++
    sockets.add(s)
    s.on('error', () => { sockets.delete(s) })
    s.on('close', () => { sockets.delete(s) })
  })
  /** The key, the asker (the last node), the key's K holders, and an agent that holds none of its records. */
  async function scene (): Promise<{ key: CID, asker: MeshNode, holders: PeerId[], byPeer: (p: PeerId) => MeshNode, honest: MeshNode }> {
    const key = await capabilityKey(cap.capability_id)
    const asker = nodes[NODES - 1]!
    const holders = await holdersOf(nodes, asker, key, K)
    expect(holders).toHaveLength(K)
    const byPeer = (p: PeerId): MeshNode => nodes.find(n => peerOf(n).equals(p))!
    const honest = nodes.find(n => n !== asker && !holders.some(h => h.equals(peerOf(n))))!
    return { key, asker, holders, byPeer, honest }
  }
  /** `count` providers nobody runs, recorded at `holder`, whose address (known to `holder` and `asker`) is the blackhole. */
  async function blackholeProviders (holder: MeshNode, asker: MeshNode, key: CID, count: number): Promise<void> {
    const port = (blackhole.address() as AddressInfo).port
    for (let i = 0; i < count; i++) {
      const fake = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
      await storeOf(holder).addProvider(key, fake)
      // the asker knows where they are (as from an answer that carried their addresses): its dials go there
      for (const n of [holder, asker]) await n.host.peerStore.merge(fake, { multiaddrs: [multiaddr(`/ip4/127.0.0.1/tcp/${port}`)] })
    }
  }
  /** One discover of a card (limit 1, no cache), and what it added to each discovery counter. */
  async function discoverOne (asker: MeshNode): Promise<{ found: string[], added: (k: keyof MeshNode['discovery']['stats']) => number }> {
    const before = { ...asker.discovery.stats }
    // the lookup alone: these cases are about what its answers name (no ask by key to the first contact)
    const found = await asker.discover({ capability: cap }, { timeoutMs: BUDGET_MS, limit: 1, cache: false, byKey: false })
    return { found: found.map(c => c.agent_id), added: (k) => asker.discovery.stats[k] - before[k] }
  }
  beforeAll(async () => {
    await new Promise<void>((resolve) => { blackhole.listen(0, '127.0.0.1', resolve) })
    // on TCP: the providers' address is a TCP listener
    nodes = await startMesh(NODES, { transport: 'tcp', nodeOptions: () => ({ dht: { k: K, alpha: K, disjointPaths: 1 } }) })
  })
  afterAll(async () => {
    await stopAll(nodes)
    for (const s of sockets) s.destroy()
    await new Promise<void>((resolve) => { blackhole.close(() => { resolve() }) })
  })

  it('goes on past them after DHT_LOOKUP_PATIENCE_MS instead of waiting for every dial to fail, and finds the honest agent', async () => {
    const { key, asker, holders, byPeer, honest } = await scene()
    // announced by no one: its records are laid out by hand below (see the first case)
    await honest.discovery.publish({ name: 'honest', capabilities: [cap] }, { announce: false })

    // the holder the asker is connected to names 20 providers nobody runs (its answer's limit), all at the blackhole
    const [first, ...rest] = holders.map(byPeer)
    await blackholeProviders(first!, asker, key, 30)
    for (const h of rest) await recordAt(h!, key, honest)
    for (const h of holders) await asker.host.hangUp(h)
    await asker.host.dial(peerOf(first!))

    const { found, added } = await discoverOne(asker)
    // before, the lookup waited for all 20 to be spent, two dials at a time of CARD_FETCH_TIMEOUT_MS each: the
    // discover ran out of time with nothing
    expect(found).toEqual([honest.agentId])
    expect(added('lookupsWaitedOut')).toBeGreaterThanOrEqual(1)
    expect(added('lookupWalks')).toBe(1)
    // one card wanted, one spare: two of the 20 were dialed (each dial made at most twice)
    expect(accepted).toBeLessThanOrEqual(4)
  })

  it('asks the other connected holders once the first one\'s providers have had their time, and does not walk', async () => {
    const { key, asker, holders, byPeer, honest } = await scene()
    // the connected round asks the contact closest to the key first (kad-dht's ids: SHA-256 of the bytes)
    const distance = distanceTo(key)
    const [closest, ...farther] = [...holders].sort((a, b) => Buffer.compare(distance(a), distance(b))).map(byPeer) as [MeshNode, ...MeshNode[]]
    // the closest names only providers nobody runs (at the blackhole); the two farther ones name the honest agent
    await storeOf(closest).removeProvider(key, peerOf(honest))
    await blackholeProviders(closest, asker, key, 20)
    for (const h of farther) await recordAt(h, key, honest)
    for (const h of holders) await asker.host.hangUp(h)
    for (const h of holders) await asker.host.dial(h)

    const { found, added } = await discoverOne(asker)
    expect(found).toEqual([honest.agentId])
    // the first answer named enough providers; once they had DHT_LOOKUP_PATIENCE_MS the lookup came back for more,
    // and the connected holders not asked yet were asked then. (The first version of one-at-a-time asking let its
    // round's clock run while the lookup waited: past 1 s it asked no one else and walked, dialing.)
    expect(added('lookupWalks')).toBe(0)
    expect(added('connectedAnswers')).toBeGreaterThanOrEqual(2)
  })
})
