/**
 * A peer cannot keep its connection from the connection budget by holding a
 * stream it never negotiates. A stream this node opened and is negotiating
 * is one of its own requests and keeps the connection (in-flight.ts); one
 * the peer opened is not, however long it stays pending. Before, a peer that
 * always kept one such stream pending was never pruned, and an honest peer
 * was pruned in its place (found by a review).
 */
import type { Connection } from '@libp2p/interface'
import { afterAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

const GRACE_MS = 300

describe('a connection held by a stream the peer never negotiates', () => {
  let nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  it('is pruned like any other; the older honest one stays', async () => {
    nodes = await startLoneNodes(3, { connectionGraceMs: GRACE_MS })
    const [V, honest, pinner] = nodes as [MeshNode, MeshNode, MeshNode]
    expect(await honest.join(V.addresses)).toBe(1)
    expect(await pinner.join(V.addresses)).toBe(1)
    // the newer connection: the first to go when both are worth the same
    const conn = pinner.host.getConnections(V.host.peerId)[0] as Connection & { muxer: { createStream: () => Promise<unknown> } }
    // a raw yamux stream with no protocol negotiation on it: V sees an inbound stream whose protocol is ''
    await conn.muxer.createStream()
    await until(() => V.host.getConnections(pinner.host.peerId).some(c => c.streams.some(s => s.protocol === '' && s.direction === 'inbound' && s.status === 'open')), 'V sees the pending stream')
    await until(() => V.host.getConnections().every(c => Date.now() - c.timeline.open >= GRACE_MS), 'both connections out of their grace')
    V.connections.setMax(1)
    await until(() => V.host.getConnections(pinner.host.peerId).length === 0, 'the pinner\'s connection is pruned')
    expect(V.host.getConnections(honest.host.peerId)).toHaveLength(1)
  })
})
