/**
 * How a private node searches for relays while it holds fewer than
 * RELAY_CLIENT_RESERVATIONS (src/wire/relay-client.ts). libp2p's random walk
 * ran DHT lookups back to back for as long (over 200 a second with one relay
 * in reach), and dialed a relay that closed every connection on open as
 * often. The node now waits between lookups, the wait doubling from
 * RELAY_DISCOVERY_BACKOFF_MIN_MS; a relay that joins later is still found.
 * Loopback only.
 */
import { afterAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { relayClientStats } from '../src/wire/host.ts'
import { RELAY_DISCOVERY_BACKOFF_MIN_MS } from '../src/wire/network-constants.ts'
import { RelayLab, type RelayRoles } from './fixtures/relay-lab.ts'
import { until } from './helpers.ts'

const lab = new RelayLab()

const node = async (roles: RelayRoles): Promise<MeshNode> => lab.node(roles)

/** Counts the DHT lookups `n` runs from now on. */
function countLookups (n: MeshNode): () => number {
  const routing = (n.host as unknown as { peerRouting: { getClosestPeers: (...a: unknown[]) => AsyncIterable<unknown> } }).peerRouting
  const orig = routing.getClosestPeers.bind(routing)
  let lookups = 0
  routing.getClosestPeers = (...a: unknown[]) => { lookups++; return orig(...a) }
  return () => lookups
}

/** The window of the tests: until the wait before the next relay lookup has doubled this many times. */
const STEPS = 3
const backedOff = (n: MeshNode, steps = STEPS): boolean => relayClientStats(n.host).backoffMs >= RELAY_DISCOVERY_BACKOFF_MIN_MS * 2 ** steps
/** Lookups a backoff of STEPS doublings allows: one at once, then one after each wait. */
const LOOKUPS_MAX = STEPS + 1
/**
 * The node's own DHT use (its card's provider records, routing table upkeep)
 * dials too: connections past the relay search's own that the window allows.
 */
const OTHER_DIALS_MAX = 4

describe('relay discovery while short of relays', () => {
  afterAll(async () => { await lab.stop() })

  it('waits longer between lookups when the one relay in reach is all it can get', async () => {
    const R = await node({ relayServer: 'on', relayClient: false })
    const P = await node({ relayServer: 'off', relayClient: true })
    await P.join(R.addresses)
    await until(() => (P.reachability?.current.relayAddresses ?? 0) > 0, 'P to hold a relay reservation on R')
    const lookups = countLookups(P)
    await until(() => lookups() > LOOKUPS_MAX || backedOff(P), `the relay lookups to back off ${STEPS} times`, 60_000)
    expect(lookups()).toBeLessThanOrEqual(LOOKUPS_MAX)
    expect(relayClientStats(P.host).reservations).toBe(1)
  }, 90_000)

  it('does not redial a relay that closes every connection on open faster than it backs off', async () => {
    const R = await node({ relayServer: 'on', relayClient: false })
    const P = await node({ relayServer: 'off', relayClient: true })
    await P.join(R.addresses)
    await until(() => (P.reachability?.current.relayAddresses ?? 0) > 0, 'P to reserve on R')
    let opens = 0
    P.host.addEventListener('connection:open', (e) => { if (e.detail.remotePeer.equals(R.host.peerId)) opens++ })
    R.host.addEventListener('connection:open', (e) => { if (e.detail.remotePeer.equals(P.host.peerId)) void e.detail.close() })
    for (const c of R.host.getConnections(P.host.peerId)) void c.close()
    // counted where the node's reachability is read
    await until(() => (P.reachability?.relayClient.reservationsRemoved ?? 0) > 0, 'P to lose its reservation')
    await until(() => opens > LOOKUPS_MAX + OTHER_DIALS_MAX || backedOff(P), `the relay lookups to back off ${STEPS} times`, 60_000)
    // each lookup dials R (the only contact of P's DHT) once
    expect(opens).toBeLessThanOrEqual(LOOKUPS_MAX + OTHER_DIALS_MAX)
    expect(P.reachability?.current.relayAddresses).toBe(0)
  }, 90_000)

  it('still finds a relay that joins the network after it backed off', async () => {
    const N = await node({ relayServer: 'off', relayClient: false })
    const P = await node({ relayServer: 'off', relayClient: true })
    await P.join(N.addresses)
    await until(() => backedOff(P, 2), 'the relay lookups to back off twice', 60_000)
    const before = relayClientStats(P.host).lookups
    const R = await node({ relayServer: 'on', relayClient: false })
    await R.join(N.addresses)
    // within a few of its lookups: the next ones ask N, which knows R now
    await until(() => (P.reachability?.current.relayAddresses ?? 0) > 0 || relayClientStats(P.host).lookups > before + 3, 'P to reserve on R', 90_000)
    expect(P.reachability?.current.relayAddresses).toBeGreaterThan(0)
    expect(relayClientStats(P.host).backoffResets).toBeGreaterThan(0)
  }, 150_000)
})
