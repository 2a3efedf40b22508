/**
 * A circuit STOP stream from a peer the node holds no reservation on made
 * libp2p's relay transport listen on that peer as a relay: a 'configured'
 * reservation, which the reservation store does not bound, made even with
 * the relay client off. 25 peers made a node announce 100 circuit addresses,
 * past what identify reads (found by a review). src/wire/relay-client.ts
 * listens only on relays the operator configured.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { RELAY_V2_STOP_CODEC } from '@libp2p/circuit-relay-v2'
import { multiaddr } from '@multiformats/multiaddr'
import { Circuit } from '@multiformats/multiaddr-matcher'
import { relayClientStats } from '../src/wire/host.ts'
import { RelayLab } from './fixtures/relay-lab.ts'
import { until } from './helpers.ts'

const lab = new RelayLab()
const PEERS = 3
const ADDRS = 4

describe('a STOP stream from a peer the node holds no reservation on', () => {
  afterAll(async () => { await lab.stop() })

  it('does not make the node reserve a slot on that peer, with the relay client off', async () => {
    const P = await lab.node({ relayServer: 'off', relayClient: false })
    const at = multiaddr(P.addresses[0]!)
    const reserved: Array<() => number> = []
    for (let i = 0; i < PEERS; i++) {
      const H = await lab.reservingPeer((_round, h) => ({
        ttlSeconds: 3600,
        addrs: Array.from({ length: ADDRS }, (_, j) => multiaddr(`/ip4/127.0.0.1/tcp/${21000 + 10 * i + j}/p2p/${h.peerId.toString()}`).bytes)
      }))
      reserved.push(H.reserves)
      const stream = await H.h.dialProtocol(at, RELAY_V2_STOP_CODEC)
      await stream.close()
    }
    const circuits = (): number => P.host.getMultiaddrs().filter(a => Circuit.matches(a)).length
    const refused = (): number => relayClientStats(P.host).stopListensRefused
    // refused (after the fix), or reserved on and announced (before it: a circuit address at least per peer)
    await until(() => refused() >= PEERS || circuits() >= PEERS, 'each STOP stream handled')
    expect(circuits(), P.host.getMultiaddrs().join(' ')).toBe(0)
    expect(reserved.map(r => r())).toEqual(Array.from({ length: PEERS }, () => 0))
    expect(relayClientStats(P.host).stopListensRefused).toBe(PEERS)
    expect(P.reachability?.current.relayAddresses ?? 0).toBe(0)
  }, 60_000)
})
