/**
 * The addresses a relay names in a reservation (src/wire/relay-client.ts).
 * libp2p took every one as the node's own circuit address: a relay that
 * named 400 made the node's identify message larger than identify's 8 KiB
 * limit, so no peer could identify it; one that named 2,000 fresh ones at
 * every renewal grew the address manager by as many each time. Loopback
 * only: the named addresses are 127.x ports nobody dials.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import type { Libp2p } from 'libp2p'
import type { MeshNode } from '../src/node.ts'
import { relayClientStats } from '../src/wire/host.ts'
import { RELAY_ADDRS_PER_RESERVATION_MAX } from '../src/wire/network-constants.ts'
import { RelayClient } from '../src/wire/relay-client.ts'
import { RelayLab } from './fixtures/relay-lab.ts'
import { until } from './helpers.ts'

const lab = new RelayLab()

/**
 * A relay that answers every RESERVE with OK and `count` addresses of its own choosing (fresh ones at each renewal with
 * `fresh`); with `fresh` or `shortLived` its reservations expire in 5 s, so libp2p renews them at its shortest, every 30 s
 * (1 s could be past by the time the node read the reply: the store then drops the reservation).
 */
async function namingRelay (count: number, fresh = false, shortLived = fresh): Promise<{ h: Libp2p, reserves: () => number }> {
  return lab.reservingPeer((round, h) => ({
    ttlSeconds: shortLived ? 5 : 3600,
    addrs: Array.from({ length: count }, (_, i) => multiaddr(fresh
      ? `/ip4/127.${(round >> 8) & 255}.${round & 255}.${1 + (i >> 8)}/tcp/${20000 + (i & 255)}/p2p/${h.peerId.toString()}`
      : `/ip4/127.0.0.1/tcp/${20000 + i}/p2p/${h.peerId.toString()}`).bytes)
  }))
}

async function meshNode (relayClient: boolean): Promise<MeshNode> {
  return lab.node(relayClient ? { relayServer: 'off', relayClient: true } : undefined)
}

describe('the addresses a relay names', () => {
  afterAll(async () => { await lab.stop() })

  it('takes at most RELAY_ADDRS_PER_RESERVATION_MAX of them, and peers can still identify the node', async () => {
    const H = await namingRelay(400)
    const P = await meshNode(true)
    await P.join(H.h.getMultiaddrs().map(a => a.toString()))
    await until(() => (P.reachability?.current.relayAddresses ?? 0) > 0, 'P to take the reservation')
    expect(P.reachability?.current.relayAddresses).toBeLessThanOrEqual(RELAY_ADDRS_PER_RESERVATION_MAX)
    // the one P reached the relay on comes first
    const via = P.host.getConnections(H.h.peerId)[0]?.remoteAddr.toString() ?? 'none'
    expect(P.host.getMultiaddrs().some(a => a.toString().startsWith(via.split('/p2p/')[0] + '/p2p/' + H.h.peerId.toString() + '/p2p-circuit'))).toBe(true)
    expect(relayClientStats(P.host).addrsDropped).toBeGreaterThanOrEqual(400 - RELAY_ADDRS_PER_RESERVATION_MAX)

    const Q = await meshNode(false)
    const identified = new Promise<string[]>(resolve => {
      Q.host.addEventListener('peer:identify', (e) => { if (e.detail.peerId.equals(P.host.peerId)) resolve(e.detail.protocols) })
    })
    await Q.host.dial(P.host.getMultiaddrs().find(a => !a.toString().includes('p2p-circuit'))!)
    const protocols = await identified
    expect(protocols).toEqual(expect.arrayContaining(P.host.getProtocols()))
  }, 60_000)

  it('keeps the addresses of a renewal that names the same ones', async () => {
    const H = await namingRelay(2, false, true)
    const P = await meshNode(true)
    await P.join(H.h.getMultiaddrs().map(a => a.toString()))
    await until(() => (P.reachability?.current.relayAddresses ?? 0) > 0, 'P to take the reservation')
    const before = P.host.getMultiaddrs().map(a => a.toString()).sort()
    await until(() => relayClientStats(P.host).renewals >= 1, 'a renewal', 90_000)
    expect(P.host.getMultiaddrs().map(a => a.toString()).sort()).toEqual(before)
    expect(relayClientStats(P.host).addrsForgotten).toBe(0)
  }, 120_000)

  it('forgets what a relay withdrew when it names fresh addresses at every renewal', async () => {
    const H = await namingRelay(2000, true)
    const P = await meshNode(true)
    await P.join(H.h.getMultiaddrs().map(a => a.toString()))
    const am = (P.host as unknown as { components: { addressManager: { transportAddresses: { addresses: Map<string, unknown> } } } }).components.addressManager
    // the relay names 127.0.<round>.x addresses: P took those of the second renewal
    await until(() => P.host.getMultiaddrs().some(a => a.toString().startsWith('/ip4/127.0.3.')), 'two renewals taken', 120_000)
      .catch((err: unknown) => { throw new Error(`${String(err)}: reserves ${H.reserves()}, ${JSON.stringify(relayClientStats(P.host))}, addresses ${P.host.getMultiaddrs().join(' ')}`) })
    // what the relay named last, and nothing of the renewals before
    expect(am.transportAddresses.addresses.size).toBeLessThanOrEqual(RELAY_ADDRS_PER_RESERVATION_MAX)
    expect(P.reachability?.current.relayAddresses).toBeLessThanOrEqual(RELAY_ADDRS_PER_RESERVATION_MAX)
    // at each renewal all but the one P reached the relay on
    expect(relayClientStats(P.host).addrsForgotten).toBeGreaterThanOrEqual(2 * (RELAY_ADDRS_PER_RESERVATION_MAX - 1))
  }, 180_000)

  it('announces every direct address, and RELAY_ADDRS_PER_RESERVATION_MAX circuit ones per relay', async () => {
    const id = async (): Promise<string> => peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()
    const self = await id()
    const relays = [await id(), await id()]
    const circuit = relays.flatMap(r => Array.from({ length: 10 }, (_, i) => multiaddr(`/ip4/10.0.0.${i}/tcp/4001/p2p/${r}/p2p-circuit/p2p/${self}`)))
    const direct = Array.from({ length: 40 }, (_, i) => multiaddr(`/ip4/192.168.0.${i}/tcp/4001/p2p/${self}`))
    const client = new RelayClient()
    expect(client.announceFilter([...circuit, ...direct.slice(0, 3)])).toHaveLength(3 + relays.length * RELAY_ADDRS_PER_RESERVATION_MAX)
    expect(client.announceFilter([...circuit, ...direct])).toHaveLength(direct.length + relays.length * RELAY_ADDRS_PER_RESERVATION_MAX)
    expect(client.stats.announceHeldBack).toBe(circuit.length - relays.length * RELAY_ADDRS_PER_RESERVATION_MAX)
  })
})
