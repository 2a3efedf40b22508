/**
 * What a private node announces (src/wire/relay-client.ts's announce
 * filter). An earlier filter capped all announced addresses together, direct
 * ones first in libp2p's order: a host with as many interface addresses as
 * that cap announced no circuit address and no public (observed or mapped)
 * one. The node's direct addresses are its own: only circuit ones are
 * bounded, per relay. Loopback only.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { multiaddr } from '@multiformats/multiaddr'
import { relayClientStats } from '../src/wire/host.ts'
import { RELAY_ADDRS_PER_RESERVATION_MAX } from '../src/wire/network-constants.ts'
import { RelayClient } from '../src/wire/relay-client.ts'
import { RelayLab } from './fixtures/relay-lab.ts'
import { until } from './helpers.ts'

const lab = new RelayLab()
/** Interface addresses of a busy host: more than the 32 the earlier filter announced in all. */
const IFACES = 40

describe('the announced addresses of a private node', () => {
  afterAll(async () => { await lab.stop() })

  it('keep every direct address, public ones after the interfaces, and RELAY_ADDRS_PER_RESERVATION_MAX circuit ones per relay', () => {
    const self = '12D3KooWRBy97UB99e3J6hiPesre1MZeuNQvfan4gBziswrRJsNK'
    const relay = '12D3KooWPjceQrSwdWXPyLLeABRXmuqt69Rg3sBYbU1Nft9HyQ6X'
    // libp2p's order: one transport address per interface, then observed and mapped ones
    const ifaces = Array.from({ length: IFACES }, (_, i) => multiaddr(`/ip4/172.${17 + (i >> 4)}.${i & 15}.1/tcp/4001/p2p/${self}`))
    const mapped = multiaddr(`/ip4/203.0.113.7/tcp/4001/p2p/${self}`)
    const circuits = Array.from({ length: 10 }, (_, i) => multiaddr(`/ip4/198.51.100.${i}/tcp/4001/p2p/${relay}/p2p-circuit/p2p/${self}`))
    const client = new RelayClient()
    const out = client.announceFilter([...ifaces, ...circuits, mapped])
    expect(out).toEqual([...ifaces, ...circuits.slice(0, RELAY_ADDRS_PER_RESERVATION_MAX), mapped])
    expect(client.stats.announceHeldBack).toBe(circuits.length - RELAY_ADDRS_PER_RESERVATION_MAX)
  })

  it('include its circuit address when it listens on many interfaces', async () => {
    const R = await lab.node({ relayServer: 'on', relayClient: false })
    const listen = Array.from({ length: IFACES }, (_, i) => `/ip4/127.0.1.${i + 1}/tcp/0`)
    const P = await lab.node({ relayServer: 'off', relayClient: true }, { listen })
    await P.join(R.addresses)
    await until(() => relayClientStats(P.host).reservations >= 1, 'P to reserve on R', 30_000)
    await until(() => P.host.getMultiaddrs().some(a => a.toString().includes(`/p2p/${R.host.peerId.toString()}/p2p-circuit`)), 'P to announce its circuit address through R', 30_000)
    expect(P.host.getMultiaddrs().filter(a => !a.toString().includes('/p2p-circuit'))).toHaveLength(IFACES)
  }, 90_000)
})
