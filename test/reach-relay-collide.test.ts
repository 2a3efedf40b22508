/**
 * Two relays naming the same address (src/wire/relay-client.ts). libp2p's
 * address manager keys an address by host, port and protocol, peer id
 * ignored, so the node takes no two relay addresses with the same key. An
 * earlier version let the relay reserved first win every such tie: a hostile
 * relay that named an honest relay's host and port under its own peer id
 * left the node a reservation on the honest relay with no address at all.
 * The address the node reached a relay on is that relay's. Loopback only.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { multiaddr } from '@multiformats/multiaddr'
import type { Libp2p } from 'libp2p'
import type { MeshNode } from '../src/node.ts'
import { relayClientStats } from '../src/wire/host.ts'
import { RelayLab, type RelayRoles } from './fixtures/relay-lab.ts'
import { until } from './helpers.ts'

const lab = new RelayLab()
const meshNode = async (roles: RelayRoles): Promise<MeshNode> => lab.node(roles)

/** A relay that grants every reservation naming `named` (host and port, no peer id) as its own addresses. */
async function impostor (named: string[]): Promise<Libp2p> {
  return (await lab.reservingPeer((_round, h) => ({ ttlSeconds: 3600, addrs: named.map(a => multiaddr(`${a}/p2p/${h.peerId.toString()}`).bytes) }))).h
}

describe('a relay naming another relay\'s address', () => {
  afterAll(async () => { await lab.stop() })

  it('does not cost that relay the address the node reached it on', async () => {
    const R = await meshNode({ relayServer: 'on', relayClient: false })
    const H = await impostor(R.host.getMultiaddrs().map(a => a.decapsulate('/p2p/' + R.host.peerId.toString()).toString()))
    const P = await meshNode({ relayServer: 'off', relayClient: true })
    const viaRelay = (relay: Libp2p): string[] => P.host.getMultiaddrs().map(a => a.toString()).filter(a => a.includes(`/p2p/${relay.peerId.toString()}/p2p-circuit`))
    await P.join(H.getMultiaddrs().map(a => a.toString()))
    await until(() => relayClientStats(P.host).reservations >= 1, 'the impostor\'s reservation')
    const dropped = relayClientStats(P.host).addrsDropped
    await P.join(R.addresses)
    await until(() => relayClientStats(P.host).reservations >= 2, 'the honest reservation', 30_000)
    await until(() => viaRelay(R.host).length === 1 && viaRelay(H).length === 1, 'one circuit address through each relay', 30_000)
      .catch((err: unknown) => { throw new Error(`${String(err)}: ${P.host.getMultiaddrs().join(' ')}`) })
    // the impostor keeps the address P reached it on, not R's
    expect(viaRelay(H)[0]).toContain(H.getMultiaddrs()[0]!.decapsulate('/p2p/' + H.peerId.toString()).toString())
    expect(relayClientStats(P.host).addrsDropped).toBeGreaterThan(dropped)
  }, 90_000)
})
