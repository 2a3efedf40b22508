/**
 * Issue #17: the connection budget keeps the peers of this node's gossip
 * mesh, reading the mesh from gossipsub at each round. gossipsub's own tags
 * (a peer-store write at every GRAFT and PRUNE, about a dozen per correlation
 * topic joined and left) are off, so the peer store holds no topic tag.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import { correlationTopic } from '../src/events/topic.ts'
import type { MeshNode } from '../src/node.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

const GRACE_MS = 300
const TASK = 'task-budget-mesh'

describe('the connection budget and the gossip mesh', () => {
  let nodes: MeshNode[] = []

  beforeAll(async () => {
    nodes = await startLoneNodes(5, { connectionGraceMs: GRACE_MS })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('keeps the mesh peers of a topic and prunes the others, with no mesh tag in the peer store', async () => {
    const [A, B, C, D, E] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode, MeshNode]
    const peer = (n: MeshNode) => peerIdOfAgent(n.agentId)
    // D and E are dialed first: with equal worth the newest go first, so only the mesh keeps B and C
    for (const n of [D, E, B, C]) await A.host.dial(n.host.getMultiaddrs()[0]!, { signal: AbortSignal.timeout(5_000) })
    // A, B and C follow one correlation: gossipsub grafts B and C into A's mesh for its topic
    const subs = await Promise.all([A, B, C].map(async n => n.events.subscribe(TASK, { participants: [A.agentId] })))
    // D and E do the same on a correlation A is not on: they differ from B and C only by A's mesh
    subs.push(...await Promise.all([D, E].map(async n => n.events.subscribe(`${TASK}-other`, { participants: [A.agentId] }))))
    const topic = correlationTopic(TASK)
    const meshOfA = (): string[] => (A.host.services.pubsub as unknown as { getMeshPeers: (t: string) => string[] }).getMeshPeers(topic)
    await until(() => [B, C].every(n => meshOfA().includes(peer(n).toString())), 'B and C in the mesh of A')
    await until(() => A.host.getConnections().every(c => Date.now() - c.timeline.open >= GRACE_MS), 'every connection of A out of its grace')

    // the mesh is not written to the peer store (gossipsub would tag each mesh peer with the topic)
    for (const n of [B, C]) expect((await A.host.peerStore.get(peer(n))).tags.has(topic)).toBe(false)

    // a bound of two: the connections to D and E, on no topic of A's, go; those to the two mesh peers stay
    // (D and E may dial A again for their own correlation: those newer connections go too, never B's or C's)
    const first = new Map([B, C, D, E].map(n => [n, A.host.getConnections(peer(n))]))
    A.connections.setMax(2)
    await until(() => [D, E].every(n => first.get(n)!.every(c => c.status !== 'open')), 'the connections to D and E pruned')
    for (const n of [B, C]) expect(first.get(n)!.some(c => c.status === 'open')).toBe(true)
    expect(A.connections.stats.pruned).toBeGreaterThanOrEqual(2)
    expect(A.connections.stats.errors).toBe(0)
    for (const s of subs) s.close()
  })
})
