/**
 * Issue #17, bounded connections at 200 nodes: the budget must not cut a
 * request in flight. Two real nodes hold a call (a stand-in for a delegation
 * whose executor takes its time to accept) on a connection that is out of its
 * grace period and carries no run tag yet; the budget of one end shrinks to
 * one connection and a fresh connection pushes that end over it. The old
 * connection is the only one the round may close: it stays while the call
 * waits, the call gets its answer, and the budget closes the connection once
 * it is idle, at the next round.
 */
import { afterEach, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { RpcClient, serve } from '../src/wire/rpc.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const GRACE_MS = 800
const PROTOCOL = '/aap-test/slow/0.1.0'
const LONG_MS = 60_000

describe('the connection budget and a request in flight', () => {
  let nodes: MeshNode[] = []
  afterEach(async () => {
    await stopAll(nodes)
    nodes = []
  })

  for (const side of ['caller', 'answerer'] as const) {
    it(`keeps the connection of a call in flight when the ${side}'s budget prunes, and prunes it once answered`, async () => {
      const opts = { nodeOptions: () => ({ connectionGraceMs: GRACE_MS }) }
      const [A, B] = await startMesh(2, opts) as [MeshNode, MeshNode]
      nodes.push(A, B)
      const entered = Promise.withResolvers<void>()
      const release = Promise.withResolvers<void>()
      const stop = await serve(B.host, {
        protocol: PROTOCOL,
        maxFrameBytes: 4096,
        handlerTimeoutMs: LONG_MS,
        methods: {
          hold: {
            handle: async () => {
              entered.resolve()
              await release.promise
              return { answered: true }
            }
          }
        }
      })
      const client = new RpcClient(A.host, { protocol: PROTOCOL, maxFrameBytes: 4096 })
      try {
        const call = client.call(B.host.peerId, 'hold', {}, { responseTimeoutMs: LONG_MS, callTimeoutMs: LONG_MS })
        const settled = call.then(body => ({ body }), (err: unknown) => ({ err }))
        await entered.promise
        const [pruner, other] = side === 'caller' ? [A, B] : [B, A]
        await until(() => pruner.host.getConnections(other.host.peerId).every(c => Date.now() - c.timeline.open > GRACE_MS), 'the connection out of its grace')
        pruner.connections.setMax(1)
        // a fresh connection (in grace, not closable) puts the pruner one over its bound: only the old one may go
        const [C] = await startMesh(1, opts) as [MeshNode]
        nodes.push(C)
        await pruner.join(C.addresses)
        // a round over the bound has looked at the old connection: kept it (busy) or closed it
        const stats = pruner.connections.stats
        await until(() => stats.keptInFlight + stats.pruned > 0, 'a prune round over the bound')
        const stillOpen = pruner.host.getConnections(other.host.peerId).length

        release.resolve()
        // the call gets its answer (cut, it fails with AGENT_NOT_FOUND: the stream closed before it answered)
        expect(await settled).toEqual({ body: { answered: true } })
        expect(stillOpen).toBeGreaterThan(0)
        expect(stats.keptInFlight).toBeGreaterThan(0)
        // answered and untagged: the connection is worth nothing now, and goes at the next round (a connection opens)
        const [D] = await startMesh(1, opts) as [MeshNode]
        nodes.push(D)
        await pruner.join(D.addresses)
        await until(() => pruner.host.getConnections(other.host.peerId).length === 0, 'the idle connection pruned')
        expect(pruner.connections.stats.pruned).toBeGreaterThan(0)
      } finally {
        release.resolve()
        client.close()
        await stop()
      }
    })
  }

  it('gets a node kept over its bound by calls in flight back under it once they are answered, with no connection opening', async () => {
    const opts = { nodeOptions: () => ({ connectionGraceMs: GRACE_MS }) }
    const [A] = await startMesh(1, opts) as [MeshNode]
    const [B] = await startMesh(1, opts) as [MeshNode]
    const [C] = await startMesh(1, opts) as [MeshNode]
    nodes.push(A, B, C)
    const release = Promise.withResolvers<void>()
    let entered = 0
    const allIn = Promise.withResolvers<void>()
    const stops = await Promise.all([B, C].map(async n => serve(n.host, {
      protocol: PROTOCOL,
      maxFrameBytes: 4096,
      handlerTimeoutMs: LONG_MS,
      methods: { hold: { handle: async () => { if (++entered === 2) allIn.resolve(); await release.promise; return { answered: true } } } }
    })))
    const client = new RpcClient(A.host, { protocol: PROTOCOL, maxFrameBytes: 4096 })
    try {
      await A.join(B.addresses)
      await A.join(C.addresses)
      const calls = [B, C].map(async n => client.call(n.host.peerId, 'hold', {}, { responseTimeoutMs: LONG_MS, callTimeoutMs: LONG_MS }))
      await allIn.promise
      await until(() => A.host.getConnections().length > 1 && A.host.getConnections().every(c => Date.now() - c.timeline.open > GRACE_MS), 'every connection out of its grace')
      const over = A.connections.stats.overBudget
      // a bound of one with every connection busy: the round closes nothing, and no connection is in its grace
      A.connections.setMax(1)
      await until(() => A.connections.stats.overBudget > over, 'a prune round that ended over the bound')
      expect(A.connections.stats.keptInFlight).toBeGreaterThan(0)
      expect(A.host.getConnections().length).toBeGreaterThan(1)
      release.resolve()
      expect(await Promise.all(calls)).toEqual([{ answered: true }, { answered: true }])
      // nothing opens a connection to A now (until A closes one: a peer keeping A among its closest may
      // redial it), so no round would come; it comes back by itself (BUDGET_BUSY_RECHECK_MS) and closes one
      await until(() => A.host.getConnections().length <= 1, 'the node back under its bound', 15_000)
      expect(A.connections.stats.pruned).toBeGreaterThan(0)
    } finally {
      release.resolve()
      client.close()
      await Promise.all(stops.map(async stop => stop()))
    }
  })
})
