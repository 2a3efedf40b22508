/**
 * The simulation counts connections at the end only once the budget had its
 * grace to prune (src/sim/resources.ts settleConnections): real nodes over
 * their bound come back under it, and the wait is bounded when they cannot.
 * The discovers at rest wait the same way for the announcements' retries
 * (settleAnnouncements).
 */
import { afterEach, describe, expect, it } from 'vitest'
import { ANNOUNCE_RETRY_MS, DHT_PUT_TIMEOUT_MS } from '../src/constants.ts'
import { settleAnnouncements, settleConnections } from '../src/sim/resources.ts'
import { startSimMesh, stopSimMesh, waitForDhtPeers, type SimNode } from '../src/sim/mesh.ts'

const over = (mesh: SimNode[], bound: number): number => mesh.filter(n => n.node.host.getConnections().length > bound).length

describe('connections at the end of a simulation', () => {
  let mesh: SimNode[] = []
  afterEach(async () => { await stopSimMesh(mesh) })

  it('waits until every node is back under its bound once the grace is over', async () => {
    const bound = 2
    mesh = await startSimMesh({ nodes: 6, transport: 'tcp', maxConnections: bound, connectionGraceMs: 300 })
    const settled = await settleConnections(() => mesh, Date.now() + 20_000)
    expect(settled).toBe(true)
    expect(over(mesh, bound)).toBe(0)
    expect(mesh.reduce((sum, n) => sum + n.node.connections.stats.pruned, 0)).toBeGreaterThan(0)
  })

  it('gives up at its deadline while nodes are still in their grace, and returns false', async () => {
    const bound = 1
    mesh = await startSimMesh({ nodes: 4, transport: 'tcp', maxConnections: bound, connectionGraceMs: 60_000 })
    // each later node joined through two earlier ones: over a bound of one, and nothing can be pruned for a minute
    expect(over(mesh, bound)).toBeGreaterThan(0)
    const t0 = Date.now()
    expect(await settleConnections(() => mesh, Date.now() + 1_500)).toBe(false)
    expect(Date.now() - t0).toBeLessThan(20_000)
    expect(over(mesh, bound)).toBeGreaterThan(0)
  })

  it('waits for the announcements\' retries to be over before the mesh is at rest, and gives up at its deadline', async () => {
    mesh = await startSimMesh({ nodes: 4, transport: 'tcp' })
    const n = mesh[0]!.node
    // with an empty routing table an announcement only waits for a first peer and schedules no retry: under load
    // the table could still be empty here, and the node was then at rest within the test's deadline
    await waitForDhtPeers([mesh[0]!], 1)
    await n.discovery.publish({ name: 'settling', capabilities: [{ capability_id: 'cap:settling', version: '1.0.0' }] }, { announce: false })
    // a walk whose time is up sends nothing: its key is walked again after ANNOUNCE_RETRY_MS, so the node is not at rest
    expect(await n.discovery.announce(AbortSignal.abort())).toBe(0)
    expect(n.discovery.announcing).toBe(true)
    expect(await settleAnnouncements(() => mesh, Date.now() + 1_000)).toBe(false)
    // the next announcement sends the records: at rest as soon as its walk reached enough peers. One that lost a
    // send on a busy machine is short, and its retry (the card's second: up to twice ANNOUNCE_RETRY_MS later) is
    // the last one, so the node is at rest by then whatever it reaches
    expect(await n.discovery.announce()).toBe(1)
    expect(await settleAnnouncements(() => mesh, Date.now() + 2 * (ANNOUNCE_RETRY_MS + DHT_PUT_TIMEOUT_MS))).toBe(true)
    expect(mesh.some(m => m.node.discovery.announcing)).toBe(false)
  }, 2 * (ANNOUNCE_RETRY_MS + DHT_PUT_TIMEOUT_MS) + 60_000)
})
