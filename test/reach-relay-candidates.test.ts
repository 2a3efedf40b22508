/**
 * Which relays a private node asks for a slot, and how many at once
 * (src/wire/relay-client.ts). libp2p queued a reservation on any peer that
 * dialed the node speaking the hop protocol, and ran them one at a time, each
 * allowed RELAY_RESERVATION_TIMEOUT_MS: five that never answered held an
 * honest relay's reservation back some 51 s. Now RELAY_RESERVATION_CONCURRENCY
 * run at once, of which RELAY_INBOUND_CANDIDATES_MAX on peers that dialed the
 * node. Loopback only.
 */
import { afterAll, describe, expect, it } from 'vitest'
import type { Libp2p } from 'libp2p'
import type { MeshNode } from '../src/node.ts'
import { relayClientStats } from '../src/wire/host.ts'
import { RELAY_INBOUND_CANDIDATES_MAX, RELAY_RESERVATION_CONCURRENCY } from '../src/wire/network-constants.ts'
import { RelayLab, type RelayRoles } from './fixtures/relay-lab.ts'
import { until } from './helpers.ts'

const lab = new RelayLab()
const meshNode = async (roles: RelayRoles): Promise<MeshNode> => lab.node(roles)

/** A peer that speaks the hop protocol and answers nothing; `opened` counts the requests it got, `ended` those their sender gave up on. */
async function silentRelay (counts: { opened: number, ended: number }): Promise<Libp2p> {
  return lab.hopPeer((stream) => {
    counts.opened++
    stream.addEventListener('close', () => { counts.ended++ })
  })
}

describe('relay candidates', () => {
  afterAll(async () => { await lab.stop() })

  it('that dialed the node are asked RELAY_INBOUND_CANDIDATES_MAX at once, so they do not hold back a relay the node dialed', async () => {
    const R = await meshNode({ relayServer: 'on', relayClient: false })
    const P = await meshNode({ relayServer: 'off', relayClient: true })
    const counts = { opened: 0, ended: 0 }
    const SILENT = 5
    for (let i = 0; i < SILENT; i++) {
      const h = await silentRelay(counts)
      await h.dial(P.host.getMultiaddrs()[0]!)
    }
    // the rest wait their turn
    await until(() => relayClientStats(P.host).candidatesRefused >= SILENT - RELAY_INBOUND_CANDIDATES_MAX && counts.opened >= RELAY_INBOUND_CANDIDATES_MAX,
      'P to ask RELAY_INBOUND_CANDIDATES_MAX of the peers that dialed it')
    await P.join(R.addresses)
    // before any request to a silent peer ran out its time
    await until(() => (P.reachability?.current.relayAddresses ?? 0) > 0 || counts.ended > 0, 'P to reserve on R', 120_000)
    expect({ reserved: (P.reachability?.current.relayAddresses ?? 0) > 0, asked: counts.opened }).toEqual({ reserved: true, asked: RELAY_INBOUND_CANDIDATES_MAX })
  }, 180_000)

  it('are asked RELAY_RESERVATION_CONCURRENCY at once, so silent relays it dialed do not hold an honest one back', async () => {
    const R = await meshNode({ relayServer: 'on', relayClient: false })
    const P = await meshNode({ relayServer: 'off', relayClient: true })
    const counts = { opened: 0, ended: 0 }
    const silent = RELAY_RESERVATION_CONCURRENCY - 1
    for (let i = 0; i < silent; i++) {
      const h = await silentRelay(counts)
      await P.join(h.getMultiaddrs().map(a => a.toString()))
    }
    await until(() => counts.opened >= 1, 'the first silent reservation request')
    await P.join(R.addresses)
    await until(() => (P.reachability?.current.relayAddresses ?? 0) > 0 || counts.ended > 0, 'P to reserve on R', 120_000)
    expect((P.reachability?.current.relayAddresses ?? 0) > 0).toBe(true)
    // the silent ones ran out their time: counted as failed reservations
    await until(() => relayClientStats(P.host).reservationsFailed >= silent, 'the silent requests counted as failed', 60_000)
  }, 180_000)
})
