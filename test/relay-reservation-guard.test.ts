/**
 * Who holds a relay's reservations (src/wire/relay-guard.ts). libp2p keeps a
 * reservation for its whole TTL (an hour) after its holder left, so
 * throwaway peer ids that reserved and left took every slot; and nothing
 * bounded how many one network took.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { circuitRelayTransport } from '@libp2p/circuit-relay-v2'
import { identify } from '@libp2p/identify'
import { tcp } from '@libp2p/tcp'
import { multiaddr } from '@multiformats/multiaddr'
import { Circuit } from '@multiformats/multiaddr-matcher'
import { createLibp2p, type Libp2p } from 'libp2p'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { relayGuardStats } from '../src/wire/host.ts'
import { RELAY_MAX_RESERVATIONS, RELAY_RESERVATIONS_PER_NETWORK_MAX } from '../src/wire/network-constants.ts'
import { networkOf } from '../src/wire/relay-guard.ts'
import { until } from './helpers.ts'

const nodes: MeshNode[] = []
const clients: Libp2p[] = []

async function relay (localMesh: boolean): Promise<MeshNode> {
  const R = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh, logger: silentLogger(), network: { relayServer: 'on', relayClient: false, upnp: false } })
  await R.start()
  nodes.push(R)
  return R
}

const reservations = (R: MeshNode): number => (R.host.services.relay as { reservations: Map<unknown, unknown> }).reservations.size

/** A stock libp2p client that asks `relayAddr` for a reservation; resolves once it has one (or the relay refused). */
async function client (relayAddr: string): Promise<{ h: Libp2p, reserved: () => boolean }> {
  const h: Libp2p = await createLibp2p({
    addresses: { listen: ['/p2p-circuit'] },
    transports: [tcp(), circuitRelayTransport()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    services: { identify: identify() }
  })
  clients.push(h)
  await h.dial(multiaddr(relayAddr))
  return { h, reserved: () => h.getMultiaddrs().some(a => Circuit.matches(a)) }
}

describe('relay reservations', () => {
  afterAll(async () => {
    await Promise.all(clients.map(async c => c.stop()))
    await Promise.all(nodes.map(async n => n.stop()))
  })

  it('groups holders by /24 and /48', () => {
    expect(networkOf(multiaddr('/ip4/203.0.113.77/tcp/1'))).toBe('203.0.113.0/24')
    expect(networkOf(multiaddr('/ip6/2001:db8:1:2::5/tcp/1'))).toBe('2001:db8:1::/48')
    expect(networkOf(multiaddr('/ip6/::ffff:10.1.2.3/tcp/1'))).toBe('10.1.2.0/24')
    expect(networkOf(multiaddr('/memory/x'))).toBeUndefined()
  })

  it('drops the reservation of a holder that left, so throwaway peers leave room for an honest one', async () => {
    const R = await relay(true)
    for (let i = 0; i < RELAY_MAX_RESERVATIONS; i += 8) {
      await Promise.all(Array.from({ length: Math.min(8, RELAY_MAX_RESERVATIONS - i) }, async () => {
        const { h, reserved } = await client(R.addresses[0]!)
        await until(reserved, 'a throwaway reservation')
        await h.stop()
      }))
    }
    await until(() => R.host.getConnections().length === 0, 'the throwaway peers gone')
    expect(reservations(R)).toBe(0)
    expect(relayGuardStats(R.host).dropped).toBe(RELAY_MAX_RESERVATIONS)

    const P = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger(), network: { relayServer: 'off', relayClient: true, upnp: false } })
    await P.start()
    nodes.push(P)
    await P.join(R.addresses)
    await until(() => (P.reachability?.current.relayAddresses ?? 0) > 0, 'P to get a relay slot')
  }, 120_000)

  it('lets one network hold RELAY_RESERVATIONS_PER_NETWORK_MAX at once (loopback too, outside a local mesh)', async () => {
    const R = await relay(false)
    const held: Array<() => boolean> = []
    for (let i = 0; i < RELAY_RESERVATIONS_PER_NETWORK_MAX; i++) {
      const { reserved } = await client(R.addresses[0]!)
      await until(reserved, `reservation ${i + 1}`)
      held.push(reserved)
    }
    await client(R.addresses[0]!)
    await until(() => relayGuardStats(R.host).refusedPerNetwork > 0, 'the next one refused')
    expect(reservations(R)).toBe(RELAY_RESERVATIONS_PER_NETWORK_MAX)
    expect(held.every(r => r())).toBe(true)
  }, 60_000)
})
