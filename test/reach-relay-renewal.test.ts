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
import { multiaddr } from '@multiformats/multiaddr'
import type { Libp2p } from 'libp2p'
import { relayClientStats } from '../src/wire/host.ts'
import { RelayLab } from './fixtures/relay-lab.ts'
import { until } from './helpers.ts'

const lab = new RelayLab()

/**
 * A relay that answers its second RESERVE badly (`mode`) and every other one with OK; its reservations expire
 * in 5 s, so libp2p renews them at its shortest, every 30 s.
 */
async function hiccupRelay (mode: 'refuse' | 'expired'): Promise<{ h: Libp2p, reserves: () => number }> {
  return lab.reservingPeer((round, h) => round === 2 && mode === 'refuse'
    ? 'refuse'
    : { ttlSeconds: round === 2 ? -1 : 5, addrs: [multiaddr(`/ip4/127.0.0.1/tcp/${20000 + round}/p2p/${h.peerId.toString()}`).bytes] })
}

describe('a failed renewal', () => {
  afterAll(async () => { await lab.stop() })

  for (const mode of ['refuse', 'expired'] as const) {
    it(`is followed by a new reservation on the relay still connected (${mode})`, async () => {
      const H = await hiccupRelay(mode)
      const P = await lab.node({ relayServer: 'off', relayClient: true })
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
