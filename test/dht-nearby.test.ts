/**
 * A provider lookup asks the connected peers nearest the key beside
 * kad-dht's walk (src/wire/dht-nearby.ts, src/wire/dht-providers.ts), so an
 * answer one open connection away does not wait for the walk.
 *
 * The mesh case uses real nodes. The peer nearest the key is made slow: its
 * provider store never answers until the test lets it, as a loaded or
 * faraway peer would, while it still answers pings and FIND_NODE. The
 * asker's routing table keeps that peer and one that has stopped, and no
 * other (kad-dht starts a walk with a random one of its closest peers, so
 * with more it could start at the holder). kad-dht's walk (alpha 1, one
 * path) fails to dial the stopped one and waits on the slow one. The walk
 * would dial, so the nearby asks go out, by the asker's connections, and get
 * the record from the next nearest peer meanwhile.
 */
import type { PeerId } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityKey } from '../src/card/card.ts'
import { DHT_NEARBY_ASKS, DHT_PROTOCOL } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { mergeSources } from '../src/util/merge.ts'
import { compareDistance, kadIdOf, nearbyAsks, nearestConnected } from '../src/wire/dht-nearby.ts'
import { lookupProviders, type ProviderLookupEvent } from '../src/wire/dht-providers.ts'
import { startMesh, stopAll } from './helpers.ts'

const log = silentLogger()

async function * items<T> (list: T[], gate?: Promise<void>): AsyncGenerator<T> {
  for (const x of list) {
    if (gate !== undefined) await gate
    yield x
  }
}

describe('mergeSources', () => {
  it('yields every item of every source, each source in its own order', async () => {
    const out: number[] = []
    for await (const x of mergeSources([items([1, 2, 3]), items([10, 20]), items<number>([])])) out.push(x)
    expect([...out].sort((a, b) => a - b)).toEqual([1, 2, 3, 10, 20])
    expect(out.filter(x => x < 10)).toEqual([1, 2, 3])
    expect(out.filter(x => x >= 10)).toEqual([10, 20])
  })

  it('does not hold one source\'s items back behind a source that waits', async () => {
    const gate = Promise.withResolvers<void>()
    const out: string[] = []
    for await (const x of mergeSources([items(['late'], gate.promise), items(['a', 'b'])])) {
      out.push(x)
      if (out.length === 2) gate.resolve()
    }
    expect(out).toEqual(['a', 'b', 'late'])
  })

  it('ends with the error of a source that fails', async () => {
    async function * failing (): AsyncGenerator<number> {
      yield 1
      throw new Error('source broke')
    }
    const out: number[] = []
    await expect((async () => { for await (const x of mergeSources([failing(), items([2])])) out.push(x) })()).rejects.toThrow('source broke')
    expect(out).toContain(1)
  })

  it('returns when the consumer stops, without waiting for a source that never yields', async () => {
    const never = Promise.withResolvers<void>()
    let stuckReturned = false
    async function * stuck (): AsyncGenerator<number> {
      try {
        await never.promise
        yield 0
      } finally {
        stuckReturned = true
      }
    }
    for await (const x of mergeSources([stuck(), items([7])])) {
      expect(x).toBe(7)
      break
    }
    // the stuck source was asked to return; it does once its wait is over
    expect(stuckReturned).toBe(false)
    never.resolve()
    await new Promise<void>(resolve => { setImmediate(resolve) })
    expect(stuckReturned).toBe(true)
  })
})

describe('nearestConnected', () => {
  let ids: PeerId[] = []
  let byDistance: PeerId[] = []
  beforeAll(async () => {
    ids = await Promise.all([1, 2, 3, 4, 5].map(async () => peerIdFromPrivateKey(await generateKeyPair('Ed25519'))))
    byDistance = [...ids].sort((a, b) => compareDistance(kadIdOf(a.toMultihash().bytes), kadIdOf(b.toMultihash().bytes), target))
  })
  const key = new TextEncoder().encode('some dht key')
  const target = kadIdOf(key)

  it('ranks by kad-dht\'s XOR distance', () => {
    const [first, second] = byDistance.map(p => kadIdOf(p.toMultihash().bytes))
    expect(compareDistance(first!, second!, target)).toBeLessThan(0)
    expect(compareDistance(second!, first!, target)).toBeGreaterThan(0)
    expect(compareDistance(first!, first!, target)).toBe(0)
  })

  it('names the nearest connected peers that serve the protocol, skipping the rest and peers not in the peer store', async () => {
    const client = byDistance[0]! // connected, but a DHT client
    const unknown = byDistance[2]! // connected, identify has not told of it yet
    const host = {
      getConnections: () => [...ids].reverse().map(remotePeer => ({ remotePeer, status: 'open' })),
      peerStore: {
        get: async (p: PeerId) => {
          if (p.equals(unknown)) throw new Error('Not Found')
          return { id: p, protocols: p.equals(client) ? ['/ipfs/id/1.0.0'] : ['/ipfs/id/1.0.0', DHT_PROTOCOL] } as never
        }
      }
    }
    const got = await nearestConnected(host, DHT_PROTOCOL, key, 2, log)
    expect(got.map(String)).toEqual([byDistance[1], byDistance[3]].map(String))
    expect(await nearestConnected({ ...host, getConnections: () => [] }, DHT_PROTOCOL, key, 2, log)).toEqual([])
    // a closing connection's peer is not asked
    const closing = { ...host, getConnections: () => ids.map(remotePeer => ({ remotePeer, status: remotePeer.equals(byDistance[1]) ? 'closing' : 'open' })) }
    expect((await nearestConnected(closing, DHT_PROTOCOL, key, 2, log)).map(String)).toEqual([byDistance[3], byDistance[4]].map(String))
  })

  it('asks none when every peer the walk starts with is connected, else the nearest connected within its reach', async () => {
    const hostOf = (connected: PeerId[]) => ({
      getConnections: () => connected.map(remotePeer => ({ remotePeer, status: 'open' })),
      peerStore: { get: async (p: PeerId) => ({ id: p, protocols: [DHT_PROTOCOL] }) as never }
    })
    // kad-dht hands its closest peers nearest first; the order must not matter here
    const starts = (list: PeerId[]) => ({ closestPeers: (_: Uint8Array, o: { count: number }) => [...list].reverse().slice(0, o.count) })
    const [d0, d1, d2, d3, d4] = byDistance as [PeerId, PeerId, PeerId, PeerId, PeerId]
    // the walk starts with connected peers only: its first round needs no dial, so no asks
    expect(await nearbyAsks(hostOf([d0, d1, d2]), starts([d0, d1, d2]), DHT_PROTOCOL, key, { count: 2, k: 3, log })).toEqual([])
    // d3 would be dialed: the nearest connected are asked
    const asked = await nearbyAsks(hostOf([d4, d2, d1, d0]), starts([d1, d2, d3]), DHT_PROTOCOL, key, { count: 2, k: 3, log })
    expect(asked.map(String)).toEqual([d0, d1].map(String))
    // d4 lies beyond the farthest peer the walk starts with (d3): never asked
    const all = await nearbyAsks(hostOf([d4, d2, d1, d0]), starts([d1, d2, d3]), DHT_PROTOCOL, key, { count: 5, k: 3, log })
    expect(all.map(String)).toEqual([d0, d1, d2].map(String))
    // with fewer than k peers in the table there is no reach to judge by: d4 is asked too
    const few = await nearbyAsks(hostOf([d4, d2]), starts([d3]), DHT_PROTOCOL, key, { count: 5, k: 3, log })
    expect(few.map(String)).toEqual([d2, d4].map(String))
  })
})

interface ProviderStore {
  addProvider: (key: unknown, peer: PeerId) => Promise<void>
  removeProvider: (key: unknown, peer: PeerId) => Promise<void>
  getProviders: (key: unknown, options?: unknown) => Promise<PeerId[]>
}
const storeOf = (n: MeshNode): ProviderStore => (n.host.services.dht as unknown as { providers: ProviderStore }).providers
const peerOf = (n: MeshNode): PeerId => peerIdOfAgent(n.agentId)
interface RoutingTable {
  remove: (peer: PeerId) => Promise<void>
  closestPeers: (kadId: Uint8Array, options: { count: number }) => PeerId[]
}

describe('a provider lookup while the peer nearest the key is slow (real nodes)', () => {
  const NODES = 6
  let nodes: MeshNode[] = []
  let asker: MeshNode
  let provider: MeshNode
  let slow: MeshNode
  let holder: MeshNode
  let cap = { capability_id: '', version: '1.0.0' }
  const release = Promise.withResolvers<PeerId[]>()

  beforeAll(async () => {
    // k above the mesh size: every peer is in every routing table, and the walk asks one peer at a time
    nodes = await startMesh(NODES, { nodeOptions: () => ({ dht: { k: 10, alpha: 1, disjointPaths: 1 } }) })
    asker = nodes[NODES - 1]!
    provider = nodes[0]!
    for (const n of nodes.slice(0, -1)) await asker.join(n.addresses)
    // a capability whose key is nearest a peer other than the provider: that peer is the slow one
    const others = nodes.slice(0, -1)
    for (let i = 0; ; i++) {
      const id = `cap:nearby-${i}`
      const target = kadIdOf((await capabilityKey(id)).multihash.bytes)
      const ranked = [...others].sort((a, b) => compareDistance(kadIdOf(peerOf(a).toMultihash().bytes), kadIdOf(peerOf(b).toMultihash().bytes), target))
      if (ranked[0] === provider) continue
      cap = { capability_id: id, version: '1.0.0' }
      slow = ranked[0]!
      holder = ranked[1]!
      break
    }
    await provider.publishCard({ name: 'near', description: 'offered once', capabilities: [cap], tags: ['near'] })
    expect(await provider.discovery.announce()).toBeGreaterThan(0)
    // only the holder keeps the record (as an ADD_PROVIDER would leave it: the record and the provider's addresses)
    const key = await capabilityKey(cap.capability_id)
    for (const n of nodes) await storeOf(n).removeProvider(key, peerOf(provider))
    await storeOf(holder).addProvider(key, peerOf(provider))
    await holder.host.peerStore.merge(peerOf(provider), { multiaddrs: provider.host.getMultiaddrs() })
    // the slow peer answers no GET_PROVIDERS until the test ends
    storeOf(slow).getProviders = async () => release.promise
    // the asker's routing table holds the slow peer and a stopped one, the walk's only starts
    const gone = others.find(n => n !== provider && n !== slow && n !== holder)!
    await gone.stop()
    nodes = nodes.filter(n => n !== gone)
    const table = (asker.host.services.dht as unknown as { routingTable: RoutingTable }).routingTable
    for (const n of others) if (n !== slow && n !== gone) await table.remove(peerOf(n))
    expect(table.closestPeers(kadIdOf(key.multihash.bytes), { count: 10 }).map(String).sort()).toEqual([peerOf(slow), peerOf(gone)].map(String).sort())
    expect(asker.host.getConnections(peerOf(gone))).toEqual([])
  })
  afterAll(async () => {
    release.resolve([])
    await stopAll(nodes)
  })

  it('the nearby asks name the provider while kad-dht\'s walk waits on the slow peer', async () => {
    const key = await capabilityKey(cap.capability_id)
    const near = await nearestConnected(asker.host, DHT_PROTOCOL, key.multihash.bytes, DHT_NEARBY_ASKS, log)
    expect(near.slice(0, 2).map(String)).toEqual([peerOf(slow), peerOf(holder)].map(String))

    // kad-dht's walk alone, beside: it asks the slow peer first
    const walkOnly = new AbortController()
    const walked: ProviderLookupEvent[] = []
    const walking = (async () => {
      try {
        for await (const ev of lookupProviders(asker.host.services.dht, asker.host.peerId, key, { want: 2, signal: walkOnly.signal, log })) walked.push(ev)
      } catch {
        // aborted below: what it named by then is the point
      }
    })()

    let first: ProviderLookupEvent | undefined
    for await (const ev of lookupProviders(asker.host.services.dht, asker.host.peerId, key, { want: 2, signal: AbortSignal.timeout(30_000), log, host: asker.host })) {
      if (ev.name === 'providers') {
        first = ev
        break
      }
    }
    walkOnly.abort()
    await walking
    expect(first).toMatchObject({ name: 'providers', nearby: true, sweep: false })
    expect(first?.name === 'providers' ? first.providers.map(String) : []).toEqual([String(peerOf(provider))])
    expect(first?.name === 'providers' ? String(first.from) : '').toBe(String(peerOf(holder)))
    expect(walked.filter(ev => ev.name === 'providers')).toEqual([])
  })

  it('a discover finds the card from the provider the nearby asks named', async () => {
    const before = asker.discovery.stats.nearbyProviders
    const found = await asker.discover({ capability: cap }, { limit: 1, cache: false })
    expect(found.map(c => c.agent_id)).toEqual([provider.agentId])
    expect(asker.discovery.stats.nearbyProviders).toBeGreaterThan(before)
  })
})
