/**
 * A bootstrap peer whose budget keeps closing a node's connection. The node
 * holds other peers, so it is not cut off: it dials its bootstrap peer back
 * after a wait that doubles per such redial. Before, it dialed back at every
 * check (5 s), for good, and so did every node the bootstrap peer pruned.
 * A node with no connection left is cut off: it dials at once, and the wait
 * starts over. Real hosts on TCP loopback; the intervals are shortened.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import { Bootstrapper } from '../src/wire/bootstrap.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { startLoopbackHost, until } from './helpers.ts'

const CHURN_MIN_MS = 40
const CHURN_MAX_MS = 160

describe('bootstrap redials a peer that prunes the connection with a growing wait', () => {
  let a: MeshHost, b: MeshHost, c: MeshHost
  let boot: Bootstrapper

  beforeAll(async () => {
    [a, b, c] = await Promise.all([startLoopbackHost(), startLoopbackHost(), startLoopbackHost()])
    await a.dial(c.getMultiaddrs()[0]!)
    boot = new Bootstrapper({
      host: a,
      addrs: [b.getMultiaddrs()[0]!.toString()],
      log: silentLogger(),
      checkMs: 10,
      churnMinMs: CHURN_MIN_MS,
      churnMaxMs: CHURN_MAX_MS
    })
    expect(await boot.start()).toBe(1)
  })
  afterAll(async () => {
    await boot.stop()
    await Promise.all([a, b, c].map(async h => h.stop()))
  })

  const linked = (): boolean => a.getConnections(b.peerId).length > 0
  const seenByB = (): boolean => b.getConnections(a.peerId).some(x => x.status === 'open')
  /** The next open (or close) of a connection between the node and the bootstrap peer, as the node sees it. */
  const next = async (type: 'connection:open' | 'connection:close'): Promise<void> => new Promise(resolve => {
    const on = (evt: CustomEvent<{ remotePeer: { equals: (p: unknown) => boolean } }>): void => {
      if (!evt.detail.remotePeer.equals(b.peerId)) return
      a.removeEventListener(type, on as never)
      resolve()
    }
    a.addEventListener(type, on as never)
  })

  it('doubles the wait per redial while the node holds other peers, and starts over once it is cut off', async () => {
    for (let k = 1; k <= 4; k++) {
      // the bootstrap peer's budget closes the connection (once it holds it too); the node still holds c
      await until(seenByB, 'the bootstrap peer to hold the connection')
      const closed = next('connection:close')
      const redialed = next('connection:open')
      await b.hangUp(a.peerId)
      await closed
      await redialed
      // the dial's round ends just after the connection opens
      await until(() => boot.churnRedials === k, `redial ${k} counted`)
      expect(boot.churnDelayMs).toBe(Math.min(CHURN_MIN_MS * 2 ** k, CHURN_MAX_MS))
    }
    // between redials the checks found the connection closed and waited (the third wait alone is 160 ms of 10 ms checks)
    expect(boot.churnWaits).toBeGreaterThan(0)

    // cut off: no connection at all; the redial is no churn, and the wait starts over
    await a.hangUp(c.peerId)
    await until(seenByB, 'the bootstrap peer to hold the connection')
    const redialed = next('connection:open')
    await b.hangUp(a.peerId)
    await redialed
    await until(() => boot.churnDelayMs === CHURN_MIN_MS, 'the round of the redial to end')
    expect(linked()).toBe(true)
    expect(boot.churnRedials).toBe(4)
    expect(boot.failedRounds).toBe(0)
  })
})
