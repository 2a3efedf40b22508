/**
 * The connection budget and relayed connections (src/wire/budget.ts): a
 * relayed connection rides on a connection to its relay, so closing that one
 * cuts the relayed one and whatever run it carries.
 *
 * P reserves a slot on relay R; C reaches P only over R and delegates a run P
 * holds. On P, a budget of one must not close the connection to R (the
 * relayed connection with the run rides on it). On R, a budget of one keeps
 * the reservation holder P; the client C's connection, which carries only the
 * hop stream C opened, is R's to close: a hop stream a peer opens does not
 * keep its connection, or anyone could pin connections to a relay with them
 * (in-flight.ts).
 */
import { afterAll, describe, expect, it } from 'vitest'
import { multiaddr } from '@multiformats/multiaddr'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { relayOf } from '../src/wire/budget.ts'
import { holdingWorkers, until } from './helpers.ts'

const nodes: MeshNode[] = []

async function node (network: { relayServer: 'on' | 'off', relayClient: boolean }, extra: Record<string, unknown> = {}): Promise<MeshNode> {
  const n = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger(), network: { ...network, upnp: false }, ...extra })
  await n.start()
  nodes.push(n)
  return n
}

/** P with a reservation on R, and C (listening nowhere) holding a run on P over R. */
async function relayedRun (tag: string, graceOn: 'P' | 'R'): Promise<{ R: MeshNode, P: MeshNode, C: MeshNode, relayed: () => boolean }> {
  const grace = { connectionGraceMs: 300 }
  const R = await node({ relayServer: 'on', relayClient: false }, graceOn === 'R' ? grace : {})
  const P = await node({ relayServer: 'off', relayClient: true }, graceOn === 'P' ? grace : {})
  const C = await node({ relayServer: 'off', relayClient: false }, { listen: [] })
  await P.join(R.addresses)
  await until(() => (P.reachability?.current.relayAddresses ?? 0) > 0, 'P to hold a relay reservation on R')
  const cap = { capability_id: `cap:relay-carrier-${tag}`, version: '1.0.0' }
  const held = new Map<string, PromiseWithResolvers<void>>()
  await holdingWorkers([P], cap, held)
  const conn = await C.host.dial(multiaddr(`${R.addresses[0]!}/p2p-circuit/p2p/${P.host.peerId.toString()}`))
  expect(conn.limits).toBeDefined()
  const run = await C.delegate({ to_agent: P.agentId, task_id: `task-relay-carrier-${tag}`, capability: cap, input: {} })
  await until(() => held.has(run.run_id), 'the run to start on P')
  const relayed = (): boolean => P.host.getConnections(C.host.peerId).some(c => c.status === 'open' && c.limits !== undefined)
  expect(relayed()).toBe(true)
  return { R, P, C, relayed }
}

describe('the budget keeps the relay connection that carries a live run', () => {
  afterAll(async () => { await Promise.all(nodes.map(async n => n.stop())) })

  it('names the relay of a relayed connection', async () => {
    const { R, P, C } = await relayedRun('names', 'P')
    for (const c of P.host.getConnections(C.host.peerId)) expect(relayOf(c)).toBe(R.host.peerId.toString())
    for (const c of P.host.getConnections(R.host.peerId)) expect(relayOf(c)).toBeUndefined()
  }, 60_000)

  it('on the private node', async () => {
    const { R, P, relayed } = await relayedRun('private', 'P')
    // every connection out of its grace, so the round may close any of them
    await until(() => P.host.getConnections().every(c => Date.now() - c.timeline.open > 300), 'P\'s connections out of grace')
    P.connections.setMax(1)
    await until(() => P.connections.stats.overBudget > 0 || P.connections.stats.pruned > 0, 'a budget round on P')
    expect({ pruned: P.connections.stats.pruned, relayed: relayed(), toR: P.host.getConnections(R.host.peerId).length > 0 })
      .toEqual({ pruned: 0, relayed: true, toR: true })
  }, 60_000)

  it('on the relay: the reservation holder is kept, a client\'s own hop stream keeps nothing', async () => {
    const { R, P, C } = await relayedRun('relay', 'R')
    await until(() => R.host.getConnections().every(c => Date.now() - c.timeline.open > 300), 'R\'s connections out of grace')
    R.connections.setMax(1)
    await until(() => R.connections.stats.pruned > 0, 'a budget round on R to close a connection')
    await until(() => R.host.getConnections(C.host.peerId).length === 0, 'the client\'s connection to close')
    expect(R.host.getConnections(P.host.peerId).length).toBeGreaterThan(0)
  }, 60_000)
})
