/**
 * Issue #17: past the hard limit (the budget plus its headroom) a node does
 * not wait for young connections to leave their grace. Its own dials past
 * the limit are closed at once when they carry only long-lived streams
 * (gossip, identify) or a step of a DHT query; a young connection with a
 * request still open is kept; and inbound connections that arrive together
 * do not take it past the limit for longer than a prune round.
 */
import type { Stream } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DHT_PROTOCOL } from '../src/constants.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import { stopAll, until } from './helpers.ts'

const BOUND = 1
const HEADROOM = 2
const HARD = BOUND + HEADROOM
/** Longer than the test: every connection it opens is in its grace throughout. */
const GRACE_MS = 120_000
/** A protocol whose streams stay open until the test closes them (a request under way). */
const HOLD = '/aap-test/hold/1.0.0'

async function node (opts: { bounded: boolean }): Promise<MeshNode> {
  const n = await createMeshNode({
    listen: ['/ip4/127.0.0.1/tcp/0'],
    localMesh: true,
    ...(opts.bounded ? { maxConnections: BOUND, connectionHeadroom: HEADROOM, connectionGraceMs: GRACE_MS } : {})
  })
  await n.start()
  return n
}

describe('the hard connection limit holds while connections are in their grace', () => {
  const nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  let A: MeshNode
  let peers: MeshNode[]
  beforeAll(async () => {
    A = await node({ bounded: true })
    nodes.push(A)
    peers = []
    for (let i = 0; i < 6; i++) peers.push(await node({ bounded: false }))
    nodes.push(...peers)
    for (const p of peers) await p.host.handle(HOLD, (stream) => { held.push(stream) })
  })
  const held: Stream[] = []
  const connected = (n: MeshNode): boolean => A.host.getConnections(peerIdOfAgent(n.agentId)).length > 0

  it('closes its own young idle dials past the hard limit, not down to the bound, and keeps one with a request open', async () => {
    for (const p of peers.slice(0, 5)) await A.host.dial(p.host.getMultiaddrs()[0]!, { signal: AbortSignal.timeout(5_000) })
    await until(() => A.host.getConnections().length <= HARD, 'A back at its hard limit')
    // in their grace: not pruned down to the bound of 1, only to the hard limit
    expect(A.host.getConnections().length).toBe(HARD)
    expect(A.connections.stats.prunedInGrace).toBeGreaterThanOrEqual(2)

    // a young connection with a request open is never the one closed
    const before = A.connections.stats.prunedInGrace
    const stream = await A.host.dialProtocol(peers[5]!.host.getMultiaddrs()[0]!, HOLD, { signal: AbortSignal.timeout(5_000) })
    await until(() => A.connections.stats.prunedInGrace > before, 'a prune round past the hard limit')
    await until(() => A.host.getConnections().length <= HARD, 'A back at its hard limit')
    expect(connected(peers[5]!)).toBe(true)
    expect(stream.status).toBe('open')
    await stream.close()
  })

  it('past the hard limit, a young connection with only a DHT query step open is closed; those with a request open are kept', async () => {
    await until(() => A.host.getConnections().length <= HARD, 'A at its hard limit')
    // every connection of A carries a request, and there are HARD of them
    const requests: Stream[] = []
    for (const c of A.host.getConnections()) requests.push(await c.newStream(HOLD, { signal: AbortSignal.timeout(5_000) }))
    for (const p of peers) {
      if (A.host.getConnections().length >= HARD) break
      if (!connected(p)) requests.push(await A.host.dialProtocol(p.host.getMultiaddrs()[0]!, HOLD, { signal: AbortSignal.timeout(5_000) }))
    }
    expect(A.host.getConnections().length).toBe(HARD)
    const before = A.connections.stats.prunedInGrace
    // one more, with a DHT stream open (a step of a query, waiting for its answer): the peer holds the
    // stream open, as a slow DHT server would, so only the budget can end it
    const q = peers.find(p => !connected(p))!
    await q.host.unhandle(DHT_PROTOCOL)
    await q.host.handle(DHT_PROTOCOL, (stream) => { held.push(stream) })
    const step = await A.host.dialProtocol(q.host.getMultiaddrs()[0]!, DHT_PROTOCOL, { signal: AbortSignal.timeout(5_000) })
    const conn = A.host.getConnections(peerIdOfAgent(q.agentId)).find(c => c.streams.includes(step))
    expect(conn).toBeDefined()
    // (a connection closing ends its streams in the same turn or the next)
    await until(() => conn!.status !== 'open' && step.status !== 'open', 'the connection with only a DHT step open to be closed')
    expect(A.connections.stats.prunedInGrace).toBeGreaterThan(before)
    expect(requests.every(s => s.status === 'open')).toBe(true)
    // (a peer may dial A meanwhile: it is refused or closed in its turn)
    await until(() => A.host.getConnections().length <= HARD, 'A back at its hard limit')
    for (const s of requests) await s.close()
  })

  it('inbound connections that arrive together never take it past the hard limit', async () => {
    const B = await node({ bounded: true })
    nodes.push(B)
    const target = B.host.getMultiaddrs()[0]!
    // counted at every open: the gater counts the connections it let through that are not open yet
    let peak = 0
    B.host.addEventListener('connection:open', () => { peak = Math.max(peak, B.host.getConnections().length) })
    const dials = await Promise.allSettled(peers.map(async p => p.host.dial(target, { signal: AbortSignal.timeout(5_000) })))
    expect(dials.length).toBe(peers.length)
    // each one past the limit is refused (libp2p at its limit, or the gater once the peer is known: the
    // dialer may see its dial succeed and the connection close) or closed at once (libp2p's pruner or the
    // budget); none waits for its grace to end
    await until(() => B.host.getConnections().length <= HARD, 'B at its hard limit')
    const toB = (p: MeshNode): boolean => p.host.getConnections(peerIdOfAgent(B.agentId)).length > 0
    await until(() => peers.filter(toB).length <= HARD, 'the dialers see at most the hard limit of connections to B')
    expect(B.host.getConnections().length).toBeGreaterThan(0)
    expect(peak).toBeLessThanOrEqual(HARD)
    // and the budget closes nothing under the hard limit before the grace is over
    expect(B.connections.stats.pruned).toBe(B.connections.stats.prunedInGrace)
  })
})
