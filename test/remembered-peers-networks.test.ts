/**
 * Remembered peers per network (src/wire/remembered-peers.ts,
 * REMEMBERED_PEERS_PER_NETWORK_MAX): a walk dials peers a DHT answer named,
 * so many identities on one network could take every place of the list and
 * decide alone where a node restarted without --bootstrap rejoins. The
 * service is driven here by identify results it is handed (no connection is
 * made: the addresses are documentation ranges); the real-node paths are in
 * test/remembered-peers.test.ts.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { Connection, IdentifyResult, Libp2pEvents, PeerId } from '@libp2p/interface'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { MemoryDatastore } from 'datastore-core'
import type { TypedEventTarget } from 'main-event'
import { describe, expect, it } from 'vitest'
import { DHT_PROTOCOL } from '../src/constants.ts'
import { quietLibp2pLogger } from '../src/wire/libp2p-log.ts'
import { REMEMBERED_PEERS_MAX, REMEMBERED_PEERS_PER_NETWORK_MAX } from '../src/wire/network-constants.ts'
import { REMEMBERED_PEERS_KEY, RememberedPeers } from '../src/wire/remembered-peers.ts'

const newPeer = async (): Promise<PeerId> => peerIdFromPrivateKey(await generateKeyPair('Ed25519'))

async function service (datastore = new MemoryDatastore()): Promise<{ remembered: RememberedPeers, identify: (peer: PeerId, at: string) => void }> {
  const events = new EventTarget()
  const remembered = new RememberedPeers({
    datastore,
    events: events as unknown as TypedEventTarget<Libp2pEvents>,
    connectionManager: { openConnection: async () => { throw new Error('no dial in this test') } },
    peerId: await newPeer(),
    logger: quietLibp2pLogger
  })
  await remembered.start()
  const identify = (peer: PeerId, at: string): void => {
    // an outbound, direct connection to a peer that serves the DHT: what the service remembers
    const connection = { direction: 'outbound', remoteAddr: multiaddr(at), limits: undefined } as unknown as Connection
    const result = { peerId: peer, protocols: [DHT_PROTOCOL], listenAddrs: [], connection } as unknown as IdentifyResult
    events.dispatchEvent(new CustomEvent('peer:identify', { detail: result }))
  }
  return { remembered, identify }
}

describe('remembered peers, per network', () => {
  it('keeps at most REMEMBERED_PEERS_PER_NETWORK_MAX peers of one /24, the newest, and the other networks\' peers with them', async () => {
    const { remembered, identify } = await service()
    try {
      const elsewhere = await newPeer()
      identify(elsewhere, '/ip4/198.51.100.7/tcp/4001')
      // many identities on one network, more than the whole list holds
      const sybils: PeerId[] = []
      for (let i = 0; i < REMEMBERED_PEERS_MAX + 4; i++) {
        const p = await newPeer()
        sybils.push(p)
        identify(p, `/ip4/203.0.113.${i + 1}/tcp/4001`)
      }
      const ids = remembered.list().map(p => p.id)
      // before: the last 16 of them, and the peer of the other network pushed out
      expect(ids).toContain(elsewhere.toString())
      expect(ids.filter(id => sybils.some(s => s.toString() === id)).sort()).toEqual(sybils.slice(-REMEMBERED_PEERS_PER_NETWORK_MAX).map(String).sort())
      expect(remembered.size).toBe(REMEMBERED_PEERS_PER_NETWORK_MAX + 1)
    } finally {
      await remembered.stop()
    }
  })

  it('counts every DNS name as one network: names cost nothing and may all point at one machine', async () => {
    const { remembered, identify } = await service()
    try {
      const elsewhere = await newPeer()
      identify(elsewhere, '/ip4/198.51.100.7/tcp/4001')
      for (let i = 0; i < REMEMBERED_PEERS_MAX + 4; i++) identify(await newPeer(), `/dns4/s${i}.names.example/tcp/4001`)
      // before: 16 places, all names, the other peer pushed out
      expect(remembered.size).toBe(REMEMBERED_PEERS_PER_NETWORK_MAX + 1)
      expect(remembered.list().map(p => p.id)).toContain(elsewhere.toString())
    } finally {
      await remembered.stop()
    }
  })

  it('holds a stored list to the share when it loads it, the newest of each network kept', async () => {
    const datastore = new MemoryDatastore()
    const stored = await Promise.all(Array.from({ length: REMEMBERED_PEERS_MAX }, async () => (await newPeer()).toString()))
    // least recently dialed first, as the service writes it
    await datastore.put(REMEMBERED_PEERS_KEY, new TextEncoder().encode(JSON.stringify({ v: 1, peers: stored.map((id, i) => ({ id, addrs: [`/ip4/203.0.113.${i + 1}/tcp/4001`] })) })))
    const { remembered } = await service(datastore)
    try {
      // before: all 16 kept, every one on one /24
      expect(remembered.list().map(p => p.id).sort()).toEqual(stored.slice(-REMEMBERED_PEERS_PER_NETWORK_MAX).sort())
    } finally {
      await remembered.stop()
    }
  })

  it('groups IPv6 peers by /48, and leaves loopback peers (a local mesh) out of the rule', async () => {
    const { remembered, identify } = await service()
    try {
      for (let i = 0; i < REMEMBERED_PEERS_PER_NETWORK_MAX + 2; i++) identify(await newPeer(), `/ip6/2001:db8:1:${i}::1/tcp/4001`)
      const other48 = await newPeer()
      identify(other48, '/ip6/2001:db8:2::1/tcp/4001')
      expect(remembered.size).toBe(REMEMBERED_PEERS_PER_NETWORK_MAX + 1)
      expect(remembered.list().map(p => p.id)).toContain(other48.toString())
      const { remembered: local, identify: identifyLocal } = await service()
      try {
        for (let i = 0; i < REMEMBERED_PEERS_MAX; i++) identifyLocal(await newPeer(), `/ip4/127.0.0.1/tcp/${4001 + i}`)
        expect(local.size).toBe(REMEMBERED_PEERS_MAX)
      } finally {
        await local.stop()
      }
    } finally {
      await remembered.stop()
    }
  })
})
