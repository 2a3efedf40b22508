/**
 * Issue #17: kad-dht's repeated work, done once (src/wire/dht-repeats.ts).
 * The closest contacts of a key are kept until the routing table changes,
 * and a peer named again with the same addresses a moment later is not
 * handled again. Real hosts for what the DHT does; the time window and the
 * address check against the wrapper alone, with a clock the test moves.
 */
import type { PeerId } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey, peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { createHash } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import { DHT_NAMED_AGAIN_MS } from '../src/constants.ts'
import { dhtRepeatStats, dhtWithoutRepeats } from '../src/wire/dht-repeats.ts'
import { dhtRepeats, type MeshHost } from '../src/wire/host.ts'
import { until } from './helpers.ts'
import { loopbackHostsPerTest } from './loopback-hosts.ts'
import type { KadDHT } from '@libp2p/kad-dht'

interface Table { size: number, kb: { closest: (id: Uint8Array) => Iterable<PeerId> }, closestPeers: (id: Uint8Array) => PeerId[] }
const tableOf = (h: MeshHost): Table => (h.services.dht as unknown as { routingTable: Table }).routingTable
const kadId = (text: string): Uint8Array => new Uint8Array(createHash('sha256').update(text).digest())
const ids = (peers: Iterable<PeerId>): string[] => [...peers].map(String)

describe('kad-dht repeats', () => {
  const start = loopbackHostsPerTest()

  it('keeps a key\'s closest contacts until the routing table gains one, and hands out copies', async () => {
    const [a, b, c] = await start(3) as [MeshHost, MeshHost, MeshHost]
    const table = tableOf(a)
    const key = kadId('cap:closest')
    await a.dial(b.getMultiaddrs()[0]!)
    await until(() => table.size >= 1, 'b in a\'s routing table')
    const first = table.closestPeers(key)
    expect(ids(first)).toEqual(ids(table.kb.closest(key)))
    first.length = 0
    const before = dhtRepeats(a).closestHits
    expect(ids(table.closestPeers(key))).toEqual([b.peerId.toString()])
    expect(dhtRepeats(a).closestHits).toBe(before + 1)
    // a new contact: the next answer is computed again, and names it
    await a.dial(c.getMultiaddrs()[0]!)
    await until(() => table.size >= 2, 'c in a\'s routing table')
    expect(ids(table.closestPeers(key)).sort()).toEqual([b.peerId.toString(), c.peerId.toString()].sort())
    expect(ids(table.closestPeers(key))).toEqual(ids(table.kb.closest(key)))
  })

  it('does not handle a peer named again in the next answer, and the first naming still counts', async () => {
    const [a, b, c] = await start(3) as [MeshHost, MeshHost, MeshHost]
    await b.dial(c.getMultiaddrs()[0]!)
    await until(() => tableOf(b).size >= 1, 'c in b\'s routing table')
    await a.dial(b.getMultiaddrs()[0]!)
    await until(() => tableOf(a).size >= 1, 'b in a\'s routing table')
    const ask = async (): Promise<void> => {
      // b answers with its closest contacts to a's own id: c
      for await (const ev of a.services.dht.getClosestPeers(kadId('anything'), { signal: AbortSignal.timeout(10_000) })) void ev
    }
    await ask()
    // c's addresses reached a's peer store from b's answer
    expect((await a.peerStore.get(c.peerId)).addresses.length).toBeGreaterThan(0)
    const before = dhtRepeats(a).namedAgain
    await ask()
    expect(dhtRepeats(a).namedAgain).toBeGreaterThan(before)
    expect(dhtRepeats(a).applied).toBe(true)
  })

  it('handles a peer named again once the window has passed or with other addresses', async () => {
    const dispatched: string[] = []
    const network = { safeDispatchEvent: (type: string, init?: { detail?: { id: PeerId } }) => { dispatched.push(`${type} ${String(init?.detail?.id)}`); return true } }
    const table = Object.assign(new EventTarget(), { closestPeers: () => [] })
    const clock = { t: 0 }
    const stats = dhtRepeatStats()
    // a peer this node holds a connection to: named peers go to the routing table's job (the network's event)
    const components = { connectionManager: { getConnections: () => [{ status: 'open' }] } }
    const dht = dhtWithoutRepeats(() => ({ routingTable: table, network }) as unknown as KadDHT, stats, () => clock.t)(components as never) as unknown as { network: typeof network }
    expect(stats.applied).toBe(true)
    const P = peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()
    // each answer decodes its own PeerId instance, as kad-dht's do
    const name = (...addrs: string[]): boolean => dht.network.safeDispatchEvent('peer', { detail: { id: peerIdFromString(P), multiaddrs: addrs.map(a => multiaddr(a)) } as never })
    name('/ip4/127.0.0.1/tcp/1')
    name('/ip4/127.0.0.1/tcp/1')
    expect(stats.namedAgain).toBe(1)
    name('/ip4/127.0.0.1/tcp/1', '/ip4/127.0.0.1/tcp/2')
    clock.t += DHT_NAMED_AGAIN_MS
    name('/ip4/127.0.0.1/tcp/2', '/ip4/127.0.0.1/tcp/1')
    // other events go through as they are
    dht.network.safeDispatchEvent('other', { detail: { id: peerIdFromString(P) } as never })
    expect(dispatched).toEqual([`peer ${P}`, `peer ${P}`, `peer ${P}`, `other ${P}`])
    expect(stats.namedAgain).toBe(1)
  })

  it('hands a named peer it holds no connection to only to peer discovery, not to the routing table\'s job', async () => {
    const dispatched: string[] = []
    const network = { safeDispatchEvent: (type: string, init?: { detail?: { id: PeerId } }) => { dispatched.push(`${type} ${String(init?.detail?.id)}`); return true } }
    const table = Object.assign(new EventTarget(), { closestPeers: () => [] })
    const stats = dhtRepeatStats()
    const discovered: string[] = []
    const made = Object.assign(new EventTarget(), { routingTable: table, network })
    made.addEventListener('peer', (evt) => { discovered.push(String((evt as CustomEvent<{ id: PeerId }>).detail.id)) })
    const connected = new Set<string>()
    const components = { connectionManager: { getConnections: (p: PeerId) => connected.has(p.toString()) ? [{ status: 'open' }] : [] } }
    const dht = dhtWithoutRepeats(() => made as unknown as KadDHT, stats)(components as never) as unknown as { network: typeof network }
    const [P, Q] = await Promise.all([1, 2].map(async () => peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()))
    connected.add(Q!)
    for (const id of [P!, Q!]) dht.network.safeDispatchEvent('peer', { detail: { id: peerIdFromString(id), multiaddrs: [multiaddr('/ip4/127.0.0.1/tcp/1')] } as never })
    // P: its addresses reach the peer store through discovery; no table job (it could only be refused)
    expect(discovered).toEqual([P])
    expect(dispatched).toEqual([`peer ${Q}`])
    expect(stats.namedUnconnected).toBe(1)
  })

  it('leaves a kad-dht without the members it needs as it is', () => {
    const stats = dhtRepeatStats()
    const plain = {}
    expect(dhtWithoutRepeats(() => plain as unknown as KadDHT, stats)({} as never)).toBe(plain)
    expect(stats.applied).toBe(false)
    expect(stats.closeTagsApplied).toBe(false)
  })
})

describe('kad-dht closest-peer tags', () => {
  const start = loopbackHostsPerTest()

  interface Tagger { newPeers?: { peers: Array<{ peer: { id: PeerId } }> }, updatePeerTags: () => Promise<void> }
  const taggerOf = (h: MeshHost): Tagger => (h.services.dht as unknown as { routingTable: { closestPeerTagger: Tagger } }).routingTable.closestPeerTagger

  it('tags the closest contacts kad-close as kad-dht does, and writes nothing when they did not change', async () => {
    const [a, b, c] = await start(3) as [MeshHost, MeshHost, MeshHost]
    await a.dial(b.getMultiaddrs()[0]!)
    await a.dial(c.getMultiaddrs()[0]!)
    const tagger = taggerOf(a)
    // kad-dht hears of each contact that answered its ping (here: connected, dht-contacts.ts)
    await until(() => (tagger.newPeers?.peers.length ?? 0) >= 2, 'b and c among a\'s closest peers')
    const stats = dhtRepeats(a)
    expect(stats.closeTagsApplied).toBe(true)
    await tagger.updatePeerTags()
    for (const peer of [b, c]) {
      const tags = (await a.peerStore.get(peer.peerId)).tags
      expect(tags.get('kad-close')?.value).toBe(50)
      // kad-dht's keep-alive stays out of the store (dht-keepalive.ts)
      expect([...tags.keys()].some(k => k.startsWith('keep-alive'))).toBe(false)
    }
    const { closeTagRefreshes, closeTagChanges } = stats
    await tagger.updatePeerTags()
    expect(stats.closeTagRefreshes).toBe(closeTagRefreshes + 1)
    expect(stats.closeTagChanges).toBe(closeTagChanges)
  })

  it('tags a peer that joins the closest set and untags one that leaves it', async () => {
    const peer = (name: string): PeerId => ({ toString: () => name }) as unknown as PeerId
    const [p1, p2, p3] = [peer('P1'), peer('P2'), peer('P3')]
    const writes: string[] = []
    const tagger = {
      newPeers: { peers: [p1, p2].map(id => ({ peer: { id } })) },
      closeTagName: 'kad-close',
      closeTagValue: 50,
      components: {
        peerStore: {
          merge: async (p: PeerId, data: { tags: Record<string, { value: number } | undefined> }) => {
            writes.push(`${String(p)} ${Object.entries(data.tags).map(([k, v]) => `${k}=${v?.value ?? '-'}`).join(' ')}`)
          }
        }
      },
      updatePeerTags: async () => {}
    }
    const stats = dhtRepeatStats()
    dhtWithoutRepeats(() => ({ routingTable: { closestPeerTagger: tagger } }) as unknown as KadDHT, stats)({} as never)
    expect(stats.closeTagsApplied).toBe(true)
    await tagger.updatePeerTags()
    expect(writes.sort()).toEqual(['P1 kad-close=50 keep-alive-kad-dht=1', 'P2 kad-close=50 keep-alive-kad-dht=1'])
    writes.length = 0
    tagger.newPeers.peers = [p2, p3].map(id => ({ peer: { id } }))
    await tagger.updatePeerTags()
    expect(writes.sort()).toEqual(['P1 kad-close=- keep-alive-kad-dht=-', 'P3 kad-close=50 keep-alive-kad-dht=1'])
    writes.length = 0
    await tagger.updatePeerTags()
    expect(writes).toEqual([])
    expect(stats).toMatchObject({ closeTagRefreshes: 3, closeTagChanges: 2, closeTagWriteFailures: 0 })

    // a write the peer store refuses is made again on the next refresh (before, the peer stayed untagged for good)
    let refuse = true
    const merge = tagger.components.peerStore.merge
    tagger.components.peerStore.merge = async (p, data) => {
      if (refuse) throw new Error('peer store busy')
      await merge(p, data)
    }
    tagger.newPeers.peers = [p1, p3].map(id => ({ peer: { id } }))
    await tagger.updatePeerTags()
    expect(stats.closeTagWriteFailures).toBe(2)
    refuse = false
    await tagger.updatePeerTags()
    expect(writes.sort()).toEqual(['P1 kad-close=50 keep-alive-kad-dht=1', 'P2 kad-close=- keep-alive-kad-dht=-'])
  })
})
