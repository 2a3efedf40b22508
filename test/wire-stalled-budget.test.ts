/**
 * Guards the connection budget against a caller that stops reading (src/wire/responder.ts watchRequests probe,
 * callerBehind; src/wire/in-flight.ts): requests that wait only because the caller does not read its answers,
 * with no handler running, are no request in flight. The responder counted its unhandled backlog as busy, so a
 * stranger that wrote requests and never read kept its connection out of the budget for as long as it liked
 * (a review).
 */
import { afterEach, describe, expect, it } from 'vitest'
import type { Stream } from '@libp2p/interface'
import { CONTROL_PROTOCOL } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { carriesRequest } from '../src/wire/in-flight.ts'
import { RawWire } from './fixtures/raw-wire.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const GRACE_MS = 800

describe('a caller that does not read and the connection budget', () => {
  let nodes: MeshNode[] = []
  afterEach(async () => {
    await stopAll(nodes)
    nodes = []
  })

  it('lets the budget prune the connection of a stranger that stopped reading its answers', async () => {
    const opts = { nodeOptions: () => ({ connectionGraceMs: GRACE_MS }) }
    const [A, B] = await startMesh(2, opts) as [MeshNode, MeshNode]
    nodes.push(A, B)
    const wire = await RawWire.open(A.host, B.host.peerId, CONTROL_PROTOCOL)
    const inbound = (): Stream | undefined =>
      B.host.getConnections(A.host.peerId).flatMap(c => c.streams).find(s => s.protocol === CONTROL_PROTOCOL && s.direction === 'inbound')
    try {
      // the stranger stops reading and sends one chunk of 6,000 empty frames (each answered with an error; a chunk
      // of many more is refused whole: RESPONDER_BACKLOG_MAX_BYTES)
      wire.stream.pause()
      wire.write(new Uint8Array(6_000))
      await until(() => inbound()?.readStatus === 'paused' && (inbound()?.writableNeedsDrain ?? false), 'B to hold its reads, its answers waiting for A')
      // requests are still unhandled, but nothing is being worked on: no request in flight on the connection
      const conns = B.host.getConnections(A.host.peerId)
      expect(conns.length).toBeGreaterThan(0)
      expect(conns.some(c => carriesRequest(c))).toBe(false)
      await until(() => B.host.getConnections(A.host.peerId).every(c => Date.now() - c.timeline.open > GRACE_MS), 'the connection out of its grace')
      B.connections.setMax(1)
      const [C] = await startMesh(1, opts) as [MeshNode]
      nodes.push(C)
      await B.join(C.addresses)
      const stats = B.connections.stats
      await until(() => stats.keptInFlight + stats.pruned > 0, 'a prune round over the bound')
      // a round that kept a connection as busy comes back BUDGET_BUSY_RECHECK_MS (4 s) later: 5 s left a busy machine 1 s
      await until(() => B.host.getConnections(A.host.peerId).length === 0, 'the stalled stranger pruned', 15_000)
      expect(stats.pruned).toBeGreaterThan(0)
    } finally {
      wire.abort()
    }
  })
})
