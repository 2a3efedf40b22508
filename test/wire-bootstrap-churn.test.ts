/**
 * The bootstrap loop's choice between a peer that prunes the connection and
 * a node that is cut off (src/wire/bootstrap.ts). The Bootstrapper needs only
 * `dial` and `getConnections` of its host; here a stand-in holds the node's
 * connections, so the test decides exactly which close: with real hosts,
 * kad-dht's own dials between them decided it for the test (review of
 * 326d825). Intervals are shortened; the churn waits are long where the test
 * shows that a node does NOT wait.
 */
import { describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import type { PeerId } from '@libp2p/interface'
import { silentLogger } from '../src/logger.ts'
import { Bootstrapper, type BootstrapInit } from '../src/wire/bootstrap.ts'
import { until } from './helpers.ts'

/** A node's connections by peer name; a dial of the bootstrap peer connects it while `reachable`. */
class StandIn {
  readonly open = new Set<string>()
  dials = 0
  reachable = true
  /** Redials the bootstrap peer prunes at once, as it connects (a peer over its limit does). */
  prunesOnDial = 0
  /** Called at each dial, before it connects. */
  onDial?: () => void
  readonly bootstrap: PeerId
  constructor (bootstrap: PeerId, others: number) {
    this.bootstrap = bootstrap
    for (let i = 0; i < others; i++) this.open.add(`other-${i}`)
  }

  host (): BootstrapInit['host'] {
    return {
      dial: (async () => {
        this.dials++
        this.onDial?.()
        if (!this.reachable) throw new Error('unreachable')
        if (this.prunesOnDial > 0) {
          this.prunesOnDial--
          return
        }
        this.open.add(this.bootstrap.toString())
      }) as unknown as BootstrapInit['host']['dial'],
      getConnections: (() => [...this.open].map(p => ({ remotePeer: { toString: () => p } }))) as unknown as BootstrapInit['host']['getConnections']
    }
  }

  prune (): void { this.open.delete(this.bootstrap.toString()) }
}

async function standIn (others: number, churn: { churnMinMs: number, churnMaxMs: number }): Promise<{ s: StandIn, boot: Bootstrapper }> {
  const b = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
  const s = new StandIn(b, others)
  const boot = new Bootstrapper({ host: s.host(), addrs: [`/ip4/127.0.0.1/tcp/4001/p2p/${b.toString()}`], log: silentLogger(), checkMs: 2, ...churn })
  expect(await boot.start()).toBe(1)
  return { s, boot }
}

/** A node with six other peers whose bootstrap peer pruned it once and was redialed; the next churn wait is ten minutes. */
async function prunedOnce (): Promise<{ s: StandIn, boot: Bootstrapper }> {
  const { s, boot } = await standIn(6, { churnMinMs: 600_000, churnMaxMs: 600_000 })
  s.prune()
  await until(() => boot.churnRedials === 1, 'the first redial')
  return { s, boot }
}

describe('bootstrap: a peer that prunes the connection, a node that is cut off', () => {
  it('redials a pruning peer after a wait that doubles while the node holds its other peers', async () => {
    const { s, boot } = await standIn(6, { churnMinMs: 20, churnMaxMs: 80 })
    // when each redial came, and the churn wait then. The peer prunes the first three redials as they connect, so
    // the redials pace themselves: pruned by the test once it saw each redial, the prune came after a wait of
    // 20 ms had ended whenever the test's poll ran that late on a busy machine, and the redial came at once
    const atRedial: Array<{ at: number, delayMs: number }> = []
    s.onDial = () => { atRedial.push({ at: performance.now(), delayMs: boot.churnDelayMs }) }
    s.prunesOnDial = 3
    try {
      s.prune()
      await until(() => boot.churnRedials >= 4, 'four redials')
      expect(atRedial).toHaveLength(4)
      // the wait after redial k, as the next redial found it (and after the fourth, as it stands): doubled each time
      const delays = [...atRedial.slice(1).map(r => r.delayMs), boot.churnDelayMs]
      expect(delays).toEqual([1, 2, 3, 4].map(k => Math.min(20 * 2 ** k, 80)))
      // the first comes at the next check; each later one only once the wait set at the one before is over (a
      // stall only makes the gap longer; a redial at the next 2 ms check would be far inside it)
      for (let k = 1; k < 4; k++) expect(atRedial[k]!.at - atRedial[k - 1]!.at).toBeGreaterThanOrEqual(atRedial[k - 1]!.delayMs)
      expect(boot.churnWaits).toBeGreaterThan(0)
      expect(s.dials).toBe(1 + 4)
      expect(boot.cutOffRedials).toBe(0)
    } finally {
      await boot.stop()
    }
  })

  it('dials at once when most of its connections closed together (a partition), however long the churn wait', async () => {
    const { s, boot } = await prunedOnce()
    try {
      // a partition: the bootstrap peer and four of the six others, at once; the wait would be ten minutes
      s.prune()
      for (let i = 0; i < 4; i++) s.open.delete(`other-${i}`)
      await until(() => boot.cutOffRedials === 1, 'the redial of a node cut off')
      expect(s.open.has(s.bootstrap.toString())).toBe(true)
      expect(boot.churnRedials).toBe(1)
      expect(boot.churnDelayMs).toBe(600_000)

      // and with no connection at all, the same
      s.open.clear()
      await until(() => boot.cutOffRedials === 1 && s.open.size === 1, 'the redial of a node with no connection')
      expect(boot.churnRedials).toBe(1)
    } finally {
      await boot.stop()
    }
  })

  it('falls back to the backoff of an unreachable bootstrap peer, and is joined again with no churn wait once it answers', async () => {
    const { s, boot } = await prunedOnce()
    try {
      s.reachable = false
      s.prune()
      for (let i = 0; i < 6; i++) s.open.delete(`other-${i}`)
      await until(() => boot.failedRounds >= 2, 'failed rounds while the peer is unreachable')
      s.reachable = true
      await until(() => s.open.has(s.bootstrap.toString()), 'joined again')
      await until(() => boot.failedRounds === 0, 'the rounds reset')
      expect(boot.churnDelayMs).toBe(600_000)
      // the wait started over: the next prune is redialed at the next check, not in ten minutes
      s.open.add('other-0')
      s.prune()
      await until(() => boot.churnRedials === 2, 'a prune after the rejoin')
    } finally {
      await boot.stop()
    }
  })
})
