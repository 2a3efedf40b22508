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
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { tcp } from '@libp2p/tcp'
import { RELAY_V2_HOP_CODEC } from '@libp2p/circuit-relay-v2'
import { pbStream } from '@libp2p/utils'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p, type Libp2p } from 'libp2p'
// the hop protocol's messages (not exported by the package)
import { HopMessage, Status } from '../node_modules/@libp2p/circuit-relay-v2/dist/src/pb/index.js'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { relayClientStats } from '../src/wire/host.ts'
import { until } from './helpers.ts'

const nodes: MeshNode[] = []
const hosts: Libp2p[] = []

async function meshNode (network: { relayServer: 'on' | 'off', relayClient: boolean }): Promise<MeshNode> {
  const n = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger(), network: { ...network, upnp: false } })
  await n.start()
  nodes.push(n)
  return n
}

/** A relay that grants every reservation naming `named` (host and port, no peer id) as its own addresses. */
async function impostor (named: string[]): Promise<Libp2p> {
  const h = await createLibp2p({
    addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
    transports: [tcp()], connectionEncrypters: [noise()], streamMuxers: [yamux()], services: { identify: identify() }
  })
  hosts.push(h)
  await h.handle(RELAY_V2_HOP_CODEC, async (stream) => {
    const hop = pbStream(stream).pb(HopMessage)
    await hop.read()
    const addrs = named.map(a => multiaddr(`${a}/p2p/${h.peerId.toString()}`).bytes)
    await hop.write({ type: HopMessage.Type.STATUS, status: Status.OK, reservation: { expire: BigInt(Math.floor(Date.now() / 1000) + 3600), addrs } })
    await stream.close()
  }, { runOnLimitedConnection: true })
  return h
}

describe('a relay naming another relay\'s address', () => {
  afterAll(async () => {
    await Promise.all(nodes.map(async n => n.stop()))
    await Promise.all(hosts.map(async h => h.stop()))
  })

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
