/**
 * The addresses a peer sends of itself (identify, the provider of an
 * ADD_PROVIDER record) are counted as those others name for it are: at most
 * PEER_ADDRS_KEPT_MAX of one peer are kept (src/wire/address-filter.ts). The
 * strangers here are stock libp2p nodes that announce a hundred addresses.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { kadDHT, passthroughMapper, type KadDHT } from '@libp2p/kad-dht'
import { ping } from '@libp2p/ping'
import { tcp } from '@libp2p/tcp'
import { serviceCapabilities, type PeerId } from '@libp2p/interface'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p, type Libp2p } from 'libp2p'
import { capabilityKey } from '../src/card/card.ts'
import { DHT_PROTOCOL } from '../src/constants.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { addressFilterOf } from '../src/wire/address-filter.ts'
import { PEER_ADDRS_KEPT_MAX } from '../src/wire/network-constants.ts'
import { until } from './helpers.ts'

// loopback addresses where nothing listens (the node listens on loopback, so each is one it may keep)
const many = Array.from({ length: 100 }, (_, i) => `/ip4/127.1.${i >> 8}.${(i & 255) + 1}/tcp/1`)

/** Stands in for identify, which kad-dht requires, and speaks none: a peer whose addresses only its provider records carry. */
class NoIdentify {
  readonly [serviceCapabilities] = ['@libp2p/identify']
  readonly [Symbol.toStringTag] = 'no-identify'
}

describe('addresses a peer names for itself', () => {
  let V: MeshNode | undefined
  const strangers: Libp2p[] = []
  beforeAll(async () => {
    V = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], logger: silentLogger() })
    await V.start()
  })
  afterAll(async () => {
    await Promise.all(strangers.map(async s => s.stop()))
    await V?.stop()
  })
  const kept = async (peer: PeerId): Promise<string[]> => V!.host.peerStore.get(peer).then(p => p.addresses.map(a => a.multiaddr.toString()), () => [])

  it('in its identify: at most PEER_ADDRS_KEPT_MAX are kept', async () => {
    const S = await createLibp2p({
      addresses: { announce: many },
      transports: [tcp()],
      connectionEncrypters: [noise()],
      streamMuxers: [yamux()],
      services: { identify: identify() }
    })
    strangers.push(S)
    const over = addressFilterOf(V!.host.peerId)!.overCount
    await S.dial(multiaddr(V!.addresses[0]!))
    // identify writes the addresses, then the agent version
    await until(async () => V!.host.peerStore.get(S.peerId).then(p => p.metadata.has('AgentVersion'), () => false), 'V to read S\'s identify')
    const addrs = await kept(S.peerId)
    expect(addrs.length).toBe(PEER_ADDRS_KEPT_MAX)
    for (const a of addrs) expect(many).toContain(a)
    expect(addressFilterOf(V!.host.peerId)!.overCount - over).toBe(many.length - PEER_ADDRS_KEPT_MAX)
  })

  it('in an ADD_PROVIDER record: at most PEER_ADDRS_KEPT_MAX are kept', async () => {
    // no identify: the provider record is the only place its addresses come from
    const S = await createLibp2p({
      addresses: { announce: many },
      transports: [tcp()],
      connectionEncrypters: [noise()],
      streamMuxers: [yamux()],
      services: { identify: () => new NoIdentify(), ping: ping(), dht: kadDHT({ protocol: DHT_PROTOCOL, clientMode: true, peerInfoMapper: passthroughMapper }) }
    })
    strangers.push(S)
    await S.dial(multiaddr(V!.addresses[0]!))
    await (S.services.dht as unknown as { routingTable: { add: (p: PeerId) => Promise<void> } }).routingTable.add(V!.host.peerId)
    expect(await kept(S.peerId)).toEqual([])
    const key = await capabilityKey('cap:many-addresses')
    for await (const _ of (S.services.dht as KadDHT).provide(key, { signal: AbortSignal.timeout(10_000) })) { /* sends ADD_PROVIDER to V */ }
    await until(async () => (await kept(S.peerId)).length > 0, 'V to store S\'s provider record')
    const addrs = await kept(S.peerId)
    expect(addrs.length).toBe(PEER_ADDRS_KEPT_MAX)
    for (const a of addrs) expect(many).toContain(a)
  })
})
