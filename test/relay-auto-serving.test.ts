/**
 * Relay mode `auto` serves the hop protocol only while the node has a public
 * address (src/wire/reachability.ts). When it lost it, it stopped taking new
 * reservations but kept those it had granted for their TTL (an hour), and
 * budget.ts kept their holders' connections: holders announced circuit
 * addresses through a relay that no longer served (found by a review).
 *
 * The public address is one the relay is told it has and never dialed: the
 * holder is a stock libp2p host whose gater dials 127.0.0.1 only, and no
 * other peer learns the address. A holder whose connection carries work
 * with the relay (a request under way) keeps it: only the slot goes.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { circuitRelayTransport } from '@libp2p/circuit-relay-v2'
import { identify } from '@libp2p/identify'
import { tcp } from '@libp2p/tcp'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { Circuit } from '@multiformats/multiaddr-matcher'
import { createLibp2p, type Libp2p } from 'libp2p'
import { CARD_PROTOCOL } from '../src/constants.ts'
import { relayServiceOf } from '../src/wire/network.ts'
import { RelayLab } from './fixtures/relay-lab.ts'
import { until } from './helpers.ts'

/** The members of libp2p's address manager (a host's `components`) the test uses to tell the relay it is public. */
interface ObservedAddrs {
  addObservedAddr: (ma: Multiaddr) => void
  confirmObservedAddr: (ma: Multiaddr) => void
  removeObservedAddr: (ma: Multiaddr) => void
}

const lab = new RelayLab()
const hosts: Libp2p[] = []

describe('relay mode auto, when the node stops serving', () => {
  afterAll(async () => {
    await Promise.all(hosts.map(async h => h.stop()))
    await lab.stop()
  })

  it('drops the reservations it granted, and their holders stop announcing circuits through it', async () => {
    const R = await lab.node(undefined, { network: { relayServer: 'auto', relayClient: false, upnp: false } })
    const local = R.addresses.find(a => a.startsWith('/ip4/127.0.0.1/'))
    expect(local, R.addresses.join(' ')).toBeDefined()
    const components: unknown = Reflect.get(R.host, 'components')
    const addressManager = (components as { addressManager: ObservedAddrs }).addressManager
    const publicAddr = multiaddr('/ip4/8.8.8.8/tcp/4999')
    addressManager.addObservedAddr(publicAddr)
    addressManager.confirmObservedAddr(publicAddr)
    await until(() => R.reachability?.current.relayServing === true, 'R to serve relay slots')

    const P = await createLibp2p({
      addresses: { listen: ['/p2p-circuit'] },
      transports: [tcp(), circuitRelayTransport()],
      connectionEncrypters: [noise()],
      streamMuxers: [yamux()],
      services: { identify: identify() },
      // R's public address is never dialed
      connectionGater: { denyDialMultiaddr: (ma) => !ma.toString().startsWith('/ip4/127.0.0.1/') }
    })
    hosts.push(P)
    const viaR = (): Multiaddr[] => P.getMultiaddrs().filter(a => Circuit.matches(a) && a.toString().includes(`/p2p/${R.host.peerId.toString()}/p2p-circuit`))
    await P.dial(multiaddr(local!))
    await until(() => viaR().length > 0, 'P to reserve a slot on R')
    expect(relayServiceOf(R.host)?.reservations.has(P.peerId)).toBe(true)

    // a second holder with work under way with R (a request stream open on its connection)
    const W = await createLibp2p({
      addresses: { listen: ['/p2p-circuit'] },
      transports: [tcp(), circuitRelayTransport()],
      connectionEncrypters: [noise()],
      streamMuxers: [yamux()],
      services: { identify: identify() },
      connectionGater: { denyDialMultiaddr: (ma) => !ma.toString().startsWith('/ip4/127.0.0.1/') }
    })
    hosts.push(W)
    await W.dial(multiaddr(local!))
    await until(() => relayServiceOf(R.host)?.reservations.has(W.peerId) === true, 'W to reserve a slot on R')
    const working = await W.dialProtocol(R.host.peerId, CARD_PROTOCOL)
    const wConn = W.getConnections(R.host.peerId)[0]!

    addressManager.removeObservedAddr(publicAddr)
    await until(() => R.reachability?.current.relayServing === false, 'R to stop serving')
    expect(relayServiceOf(R.host)?.reservations.size).toBe(0)
    await until(() => viaR().length === 0, 'P to drop its circuit addresses through R')
    // W's connection carries its request: kept (it learns at its reservation's renewal), not cut with its stream
    expect(wConn.status).toBe('open')
    expect(working.status).toBe('open')
  }, 60_000)
})
