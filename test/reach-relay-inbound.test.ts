/**
 * A relay that dialed the private node first (src/wire/relay-client.ts). An
 * earlier version refused every relay candidate it had not dialed itself,
 * so an honest relay whose only connection was inbound was never asked for
 * a slot while that connection stayed open, not even when the operator
 * pointed the node at it (join reuses the open connection). Stock libp2p
 * reserved over it; now RELAY_INBOUND_CANDIDATES_MAX such candidates are
 * asked at once. Loopback only.
 */
import { afterAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { relayClientStats } from '../src/wire/host.ts'
import { RelayLab, type RelayRoles } from './fixtures/relay-lab.ts'
import { until } from './helpers.ts'

const lab = new RelayLab()
const meshNode = async (roles: RelayRoles): Promise<MeshNode> => lab.node(roles)

describe('a relay that dialed the node', () => {
  afterAll(async () => { await lab.stop() })

  it('is asked for a slot over its connection', async () => {
    const R = await meshNode({ relayServer: 'on', relayClient: false })
    const P = await meshNode({ relayServer: 'off', relayClient: true })
    await R.host.dial(P.host.getMultiaddrs()[0]!)
    await until(() => (P.reachability?.current.relayAddresses ?? 0) > 0, 'P to reserve on R', 30_000)
    expect(P.host.getConnections(R.host.peerId).map(c => c.direction)).toEqual(['inbound'])
    expect(relayClientStats(P.host).candidatesRefused).toBe(0)
  }, 90_000)
})
