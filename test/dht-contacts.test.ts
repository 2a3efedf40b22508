/**
 * Issue #17: kad-dht's routing table does not dial a peer just to add it.
 *
 * kad-dht pings every peer a DHT answer names before adding it to its table,
 * and a ping to a peer this node is not connected to dials it. Under the
 * connection budget those dials were the largest share of all dials in a
 * 100-node simulation. src/wire/dht-contacts.ts answers for a connected or
 * just-disconnected peer, pings contacts of the table as before, and leaves a
 * peer that was only named out of the table without a dial.
 */
import type { PeerId } from '@libp2p/interface'
import { describe, expect, it } from 'vitest'
import { ContactNotVerifiedError, livenessPing, type ContactLivenessStats } from '../src/wire/dht-contacts.ts'
import { dhtContactStats, dhtRepeats, type MeshHost } from '../src/wire/host.ts'
import { until } from './helpers.ts'
import { loopbackHostsPerTest } from './loopback-hosts.ts'

interface DhtInternals {
  network: { safeDispatchEvent: (type: 'peer', init: { detail: { id: PeerId, multiaddrs: unknown[], protocols: string[] } }) => void }
  routingTable: { find: (p: PeerId) => Promise<PeerId | undefined>, remove: (p: PeerId) => Promise<void> }
}
const internals = (h: MeshHost): DhtInternals => h.services.dht as unknown as DhtInternals

/** Count the connections `host` opens to `peer` from now on. */
function opensTo (host: MeshHost, peer: PeerId): () => number {
  let n = 0
  host.addEventListener('connection:open', (evt) => { if (evt.detail.remotePeer.equals(peer)) n++ })
  return () => n
}

const zero = (): ContactLivenessStats => ({ connected: 0, recent: 0, unverified: 0, pinged: 0, failed: 0 })

describe('DHT contacts are judged alive without a connection of their own', () => {
  const start = loopbackHostsPerTest()

  it('a peer only named in a DHT answer is neither dialed nor added; a peer connected a moment ago is added without a dial', async () => {
    const [a, named, gone] = await start(3) as [MeshHost, MeshHost, MeshHost]
    const dialsToNamed = opensTo(a, named.peerId)
    // kad-dht hears of `named` the way it hears of the closer peers in an answer
    internals(a).network.safeDispatchEvent('peer', { detail: { id: named.peerId, multiaddrs: named.getMultiaddrs(), protocols: [] } })
    // no routing-table job at all (dht-repeats.ts: it could only be refused), but its addresses reach the peer store
    expect(dhtRepeats(a).namedUnconnected).toBe(1)
    await until(async () => (await a.peerStore.get(named.peerId).catch(() => undefined))?.addresses.length === named.getMultiaddrs().length, 'the named peer\'s addresses in the peer store')
    expect(dhtContactStats(a).unverified).toBe(0)
    expect(dialsToNamed()).toBe(0)
    expect(a.getConnections(named.peerId)).toHaveLength(0)
    expect(await internals(a).routingTable.find(named.peerId)).toBeUndefined()

    // `gone` was connected (so a contact), then the connection closed and the table dropped it
    await a.dial(gone.getMultiaddrs()[0]!)
    await until(async () => await internals(a).routingTable.find(gone.peerId) !== undefined, 'the connected peer to enter the table')
    expect(dhtContactStats(a).connected).toBeGreaterThanOrEqual(1)
    await Promise.all(a.getConnections(gone.peerId).map(async c => c.close()))
    await internals(a).routingTable.remove(gone.peerId)
    const dialsToGone = opensTo(a, gone.peerId)
    internals(a).network.safeDispatchEvent('peer', { detail: { id: gone.peerId, multiaddrs: gone.getMultiaddrs(), protocols: [] } })
    await until(async () => await internals(a).routingTable.find(gone.peerId) !== undefined, 'the recent peer to enter the table again')
    expect(dhtContactStats(a).recent).toBe(1)
    expect(dialsToGone()).toBe(0)
    expect(dhtContactStats(a).pinged).toBe(0)
  })

  it('a contact of the table that is not connected any more is pinged over the network, which dials it', async () => {
    const [a, b] = await start(2) as [MeshHost, MeshHost]
    const stats = zero()
    let inTable = false
    const ping = livenessPing({ ping: a.services.ping, connectionManager: a, events: a, logger: a.logger }, stats, { inTable: async () => inTable, freshMs: 0 })

    await a.dial(b.getMultiaddrs()[0]!)
    expect(await ping.ping(b.peerId)).toBe(0)
    expect(stats.connected).toBe(1)
    await Promise.all(a.getConnections(b.peerId).map(async c => c.close()))

    // freshMs 0: a closed connection is no evidence; a peer that is no contact is not dialed
    const dials = opensTo(a, b.peerId)
    await expect(ping.ping(b.peerId)).rejects.toBeInstanceOf(ContactNotVerifiedError)
    expect(stats.unverified).toBe(1)
    expect(dials()).toBe(0)

    // a contact is pinged for real: a full bucket keeps the contacts that answer
    inTable = true
    expect(await ping.ping(b.peerId)).toBeGreaterThanOrEqual(0)
    expect(stats.pinged).toBe(1)
    expect(dials()).toBe(1)

    // and one that went away fails its ping, so kad-dht can evict it
    await Promise.all(a.getConnections(b.peerId).map(async c => c.close()))
    await b.stop()
    await expect(ping.ping(b.peerId, { signal: AbortSignal.timeout(5_000) })).rejects.toThrow()
    expect(stats.failed).toBe(1)
  })
})
