/**
 * The bootstrap loop (src/wire/bootstrap.ts) with real nodes: an address
 * without /p2p/<id> counts as connected once its peer is, and a node that
 * holds its peers while its bootstrap peer is gone tries that peer at the
 * churn wait, not at the retry backoff; a round that reaches peers remembered
 * from before tells onJoined. Intervals are shortened.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { Bootstrapper } from '../src/wire/bootstrap.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

describe('bootstrap loop', () => {
  const nodes: MeshNode[] = []
  const loops: Bootstrapper[] = []
  afterAll(async () => {
    await Promise.all(loops.map(async l => l.stop()))
    await stopAll(nodes)
  })

  it('counts an address without /p2p/ as connected once its peer is', async () => {
    const [A, B] = await startLoneNodes(2)
    nodes.push(A!, B!)
    const bare = A!.addresses[0]!.replace(/\/p2p\/[^/]+$/, '')
    expect(bare).not.toContain('/p2p/')
    const loop = new Bootstrapper({ host: B!.host, addrs: [bare], log: silentLogger(), checkMs: 20, churnMinMs: 20, churnMaxMs: 40 })
    loops.push(loop)
    expect(await loop.start()).toBe(1)
    await until(() => loop.connected() === 1, 'the bare address to count as connected', 5_000)
    expect(loop.churnRedials).toBe(0)
  }, 30_000)

  it('tries a gone bootstrap peer at the churn wait while the node holds other peers', async () => {
    const [A, B, C] = await startLoneNodes(3)
    nodes.push(A!, B!, C!)
    // C joined through A and holds B too; the churn wait is long, the check short
    const loop = new Bootstrapper({ host: C!.host, addrs: [A!.addresses[0]!], log: silentLogger(), checkMs: 20, churnMinMs: 600_000, churnMaxMs: 600_000 })
    loops.push(loop)
    expect(await loop.start()).toBe(1)
    await C!.join(B!.addresses)
    await A!.stop()
    await until(() => loop.failedRounds >= 1, 'the first try of the gone peer')
    // checks go on (every 20 ms) and wait out the churn wait instead of dialing again
    await until(() => loop.churnWaits >= 5, 'checks that wait', 5_000)
    expect({ failedRounds: loop.failedRounds, held: C!.host.getConnections(B!.host.peerId).length > 0 }).toEqual({ failedRounds: 1, held: true })
  }, 30_000)

  it('a later round that reaches remembered peers is told as a join, and the gone bootstrap peer is still tried', async () => {
    const [A, B, C] = await startLoneNodes(3)
    nodes.push(A!, B!, C!)
    const gone = A!.addresses[0]!
    await A!.stop()
    // what C remembers: nothing that answers at the first round, B at the next
    let asked = 0
    const remembered = async (signal: AbortSignal): Promise<number> => {
      asked++
      return asked === 1 ? 0 : (await C!.join(B!.addresses, signal))
    }
    const joins: number[] = []
    const loop = new Bootstrapper({ host: C!.host, addrs: [gone], log: silentLogger(), remembered, onJoined: (n) => { joins.push(n) }, checkMs: 20, churnMinMs: 20, churnMaxMs: 40 })
    loops.push(loop)
    expect(await loop.start()).toBe(0)
    await until(() => joins.length > 0, 'the rejoin told')
    expect(joins).toEqual([1])
    expect(loop.rejoined).toBe(1)
    expect(C!.host.getConnections(B!.host.peerId).length).toBeGreaterThan(0)
    // held peers now, so no more remembered dials; the bootstrap peer is dialed again
    await until(() => loop.failedRounds >= 3, 'more tries of the bootstrap peer', 10_000)
    expect(asked).toBe(2)
  }, 30_000)
})
