/**
 * A renewal that fails while the connection to the relay stays open
 * (src/wire/relay-client.ts). libp2p drops the reservation and never asks
 * that relay again: its discovery skips peers the node is connected to, and
 * the hop topology does not tell it of the relay twice. One refused or
 * unreadable renewal (an expiry already past makes the store's keep-alive
 * tag write throw) lost the slot on that relay for good. Now the node asks
 * it again after the discovery's current wait, at most
 * RELAY_REASK_DELAY_MAX_MS. Loopback only.
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

/**
 * A relay that answers its second RESERVE badly (`mode`) and every other one with OK; its reservations expire
 * in 5 s, so libp2p renews them at its shortest, every 30 s.
 */
async function hiccupRelay (mode: 'refuse' | 'expired'): Promise<{ h: Libp2p, reserves: () => number }> {
  const h = await createLibp2p({
    addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
    transports: [tcp()], connectionEncrypters: [noise()], streamMuxers: [yamux()], services: { identify: identify() }
  })
  hosts.push(h)
  let reserves = 0
  await h.handle(RELAY_V2_HOP_CODEC, async (stream) => {
    const hop = pbStream(stream).pb(HopMessage)
    await hop.read()
    reserves++
    const now = Math.floor(Date.now() / 1000)
    if (reserves === 2 && mode === 'refuse') {
      await hop.write({ type: HopMessage.Type.STATUS, status: Status.RESERVATION_REFUSED })
    } else {
      const expire = reserves === 2 ? now - 1 : now + 5
      await hop.write({ type: HopMessage.Type.STATUS, status: Status.OK, reservation: { expire: BigInt(expire), addrs: [multiaddr(`/ip4/127.0.0.1/tcp/${20000 + reserves}/p2p/${h.peerId.toString()}`).bytes] } })
    }
    await stream.close()
  }, { runOnLimitedConnection: true })
  return { h, reserves: () => reserves }
}

describe('a failed renewal', () => {
  afterAll(async () => {
    await Promise.all(nodes.map(async n => n.stop()))
    await Promise.all(hosts.map(async h => h.stop()))
  })

  for (const mode of ['refuse', 'expired'] as const) {
    it(`is followed by a new reservation on the relay still connected (${mode})`, async () => {
      const H = await hiccupRelay(mode)
      const P = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger(), network: { relayServer: 'off', relayClient: true, upnp: false } })
      await P.start()
      nodes.push(P)
      await P.join(H.h.getMultiaddrs().map(a => a.toString()))
      await until(() => relayClientStats(P.host).reservations >= 1, 'the first reservation')
      await until(() => relayClientStats(P.host).reservationsRemoved >= 1, 'the failed renewal to drop the reservation', 60_000)
      await until(() => relayClientStats(P.host).reservations >= 2 && (P.reachability?.current.relayAddresses ?? 0) > 0, 'a reservation again', 60_000)
      expect(H.reserves()).toBeGreaterThanOrEqual(3)
      expect(relayClientStats(P.host).reasked).toBeGreaterThanOrEqual(1)
      expect(P.host.getConnections(H.h.peerId).map(c => `${c.direction}:${c.status}`)).toEqual(['outbound:open'])
    }, 180_000)
  }
})
