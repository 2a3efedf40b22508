/**
 * Issue #17: the budget values a peer by its tags, and keeps what it read
 * (a round used to read the tags of every connection at every connection
 * opened). What it keeps must follow the peer store: a tag changed after it
 * was read counts at the next round.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

const GRACE_MS = 300
/** Two tags of the most a tag may be worth: above any libp2p writes itself (kad-dht's closest peers: 50 + 1, gossipsub's mesh peers: small). */
const PRECIOUS = { 'precious-a': { value: 100 }, 'precious-b': { value: 100 } }

describe('the connection budget values peers by their current tags', () => {
  let nodes: MeshNode[] = []

  beforeAll(async () => {
    nodes = await startLoneNodes(5, { connectionGraceMs: GRACE_MS })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('a tag dropped after the budget read it makes that peer the first to go', async () => {
    const [A, B, C, D, E] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode, MeshNode]
    const peer = (n: MeshNode) => peerIdOfAgent(n.agentId)
    const connected = (n: MeshNode): boolean => A.host.getConnections(peer(n)).length > 0
    // B is dialed first, so it is the oldest: with equal worth the newest go first and B would stay
    for (const n of [B, C, D, E]) await A.host.dial(n.host.getMultiaddrs()[0]!, { signal: AbortSignal.timeout(5_000) })
    for (const n of [B, C, D]) await A.host.peerStore.merge(peer(n), { tags: PRECIOUS })
    const outOfGrace = (): boolean => A.host.getConnections().every(c => Date.now() - c.timeline.open >= GRACE_MS)
    await until(outOfGrace, 'every connection of A out of its grace')

    // first round: E, the one untagged peer, goes; B, C and D are valued at 200 and that is kept
    A.connections.setMax(3)
    await until(() => !connected(E), 'E pruned')
    expect([B, C, D].every(connected)).toBe(true)

    // B loses its tag; the next round must see it (a kept value of 200 would close D, the newest, instead)
    await A.host.peerStore.merge(peer(B), { tags: { 'precious-a': undefined, 'precious-b': undefined } })
    A.connections.setMax(2)
    await until(() => !connected(B), 'B pruned')
    expect(connected(C)).toBe(true)
    expect(connected(D)).toBe(true)
    expect(A.connections.stats.pruned).toBe(2)
  })
})
