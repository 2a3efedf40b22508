/**
 * Joining through bootstrap peers, and staying joined: dial every bootstrap
 * address; while none of those peers is connected, try again with a doubling
 * wait (BOOTSTRAP_RETRY_MIN_MS up to BOOTSTRAP_RETRY_MAX_MS); once one is,
 * check every BOOTSTRAP_CHECK_INTERVAL_MS that one still is. So a node started
 * before its bootstrap peer joins when that peer comes up, and a node cut off
 * by a partition dials back in when it heals.
 *
 * A bootstrap peer is the first peer of many nodes, and its connection budget
 * prunes most of them once they have other peers (a new connection is kept
 * CONNECTION_GRACE_MS first). A node that still holds other connections and
 * finds its bootstrap connection closed again after it dialed it back does
 * not dial again at the next check: it waits BOOTSTRAP_CHURN_MIN_MS from that
 * redial, doubling per such redial up to BOOTSTRAP_CHURN_MAX_MS, so the
 * pruned nodes of a mesh do not redial their bootstrap peer about every
 * 25 s (grace and check) for good. A node that looks cut off dials at once
 * and the wait starts over: it holds no connection, or at most half of those
 * it held at its last redial (a partition closes many connections at once, a
 * budget one). A partition that closes fewer than half of a node's
 * connections is noticed at the end of the wait at the latest.
 *
 * A redial that fails while the node holds its peers is churn too (the
 * bootstrap peer is gone, the node is not cut off): the next one waits the
 * same doubling wait. Before, such a node redialed a bootstrap peer that was
 * gone for good every 15 s for good (found by a review). One that holds no
 * peer, or at most half of those it held, dials with the retry backoff.
 *
 * A round that reaches no bootstrap peer while the node holds no connection
 * at all also dials the peers the node remembers having dialed before
 * (`remembered`, remembered-peers.ts): a node restarted while every bootstrap
 * peer it was given is gone gets back into the mesh through them. It goes on
 * dialing its bootstrap peers with backoff meanwhile.
 *
 * A bootstrap address without /p2p/<id> counts as connected once the peer it
 * reached is: the peer id of its first successful dial is kept. Before, such
 * an address never counted, and the loop redialed it at every check.
 *
 * With no bootstrap address at all (a node started without --bootstrap), the
 * loop keeps the node joined through its remembered peers alone
 * (runRemembered): its first round dials them unless the node already holds
 * a connection into the mesh (one it opened, or one to a peer that serves the
 * DHT; a scanner's is none); later, a node that holds no such connection
 * dials them with the retry backoff. A round with no remembered peer to dial
 * counts as no failed round, and holding such a connection again clears the
 * count. Before, only a node started with --bootstrap ran the loop, so one
 * restarted with its data dir but without the flag never used them.
 */
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Libp2p } from '@libp2p/interface'
import { DHT_PROTOCOL } from '../constants.ts'
import type { Logger } from '../logger.ts'
import { allowConfigured } from './address-filter.ts'
import {
  BOOTSTRAP_MESH_PEER_CHECKS_MAX, BOOTSTRAP_CHECK_INTERVAL_MS, BOOTSTRAP_CHURN_MAX_MS, BOOTSTRAP_CHURN_MIN_MS, BOOTSTRAP_DIAL_TIMEOUT_MS, BOOTSTRAP_RETRY_MAX_MS,
  BOOTSTRAP_RETRY_MIN_MS
} from './network-constants.ts'

export interface BootstrapInit {
  host: Pick<Libp2p, 'dial' | 'getConnections'>
  /** Multiaddrs, best with their /p2p/<peer id> (without, the id of the peer first reached is kept). */
  addrs: string[]
  log: Logger
  /** Called after each round (after the first) that connected a bootstrap peer none was connected before, or reached remembered peers. */
  onJoined?: (peers: number) => void
  /** Dial the peers remembered from before (remembered-peers.ts); resolves to how many answered. */
  remembered?: (signal: AbortSignal) => Promise<number>
  /** Whether any peer is remembered (a loop with no bootstrap address skips the rounds that would dial none). */
  hasRemembered?: () => boolean
  /** The check interval and the churn waits (default the BOOTSTRAP_* constants; shorter in tests). */
  checkMs?: number
  churnMinMs?: number
  churnMaxMs?: number
}

export class Bootstrapper {
  private readonly init: BootstrapInit
  private readonly addrs: Multiaddr[]
  /** The peer id of each address: its /p2p/ component, or the peer its first successful dial reached. */
  private readonly ids: Array<string | undefined>
  private readonly ctl = new AbortController()
  private first?: Promise<unknown>
  private loop?: Promise<void>
  /** Dial rounds that reached no bootstrap peer, since the last that did (a metric for operators). */
  failedRounds = 0
  /** Redials of a bootstrap peer that closed the connection again while this node held others. */
  churnRedials = 0
  /** Checks that found the bootstrap connection closed but waited (the node held others; see the module comment). */
  churnWaits = 0
  /** Redials at once because the node looked cut off (most of its connections gone) while a churn wait ran. */
  cutOffRedials = 0
  /** Rounds that reached no bootstrap peer, held no connection, and reached a remembered peer. */
  rejoined = 0
  /** With no bootstrap address: the wait before the next round while the node holds no connection into the mesh (holdsMeshPeer). */
  retryWaitMs = BOOTSTRAP_RETRY_MIN_MS
  /** Connections the node held at its last churn redial. */
  private heldAtRedial = 0
  /** The wait before the next such redial: BOOTSTRAP_CHURN_MIN_MS, doubled per redial. */
  churnDelayMs: number
  private nextChurnRedial = 0
  private readonly checkMs: number
  private readonly churnMinMs: number
  private readonly churnMaxMs: number

  constructor (init: BootstrapInit) {
    this.init = init
    this.addrs = init.addrs.map(a => multiaddr(a))
    this.ids = this.addrs.map(a => a.getComponents().findLast(c => c.name === 'p2p')?.value)
    // the operator's addresses: kept and dialed whatever their kind (address-filter.ts)
    const self = (init.host as Partial<Pick<Libp2p, 'peerId'>>).peerId
    if (self !== undefined) allowConfigured(self, this.addrs)
    this.checkMs = init.checkMs ?? BOOTSTRAP_CHECK_INTERVAL_MS
    this.churnMinMs = init.churnMinMs ?? BOOTSTRAP_CHURN_MIN_MS
    this.churnMaxMs = init.churnMaxMs ?? BOOTSTRAP_CHURN_MAX_MS
    this.churnDelayMs = this.churnMinMs
  }

  /** One round of dials now; then the loop runs until stop(). Returns how many answered (remembered peers reached included). */
  async start (): Promise<number> {
    const first = this.round(this.addrs.length === 0)
    this.first = first
    const { joined, rejoined } = await first
    this.loop = this.addrs.length === 0 ? this.runRemembered() : this.run(joined > 0)
    return joined + rejoined
  }

  /** Ends the loop, and the first round's dials if they are still going (the node is not stopped under them). */
  async stop (): Promise<void> {
    this.ctl.abort()
    // its failure is start()'s caller's to hear
    await this.first?.then(() => {}, () => {})
    await this.loop
  }

  /** Bootstrap peers connected right now. */
  connected (): number {
    const conns = this.init.host.getConnections()
    return this.ids.filter(id => id !== undefined && conns.some(c => c.remotePeer.toString() === id)).length
  }

  /**
   * Bootstrap peers that answered, and remembered peers reached when none did and the node held no connection
   * (`meshOnly`: no connection to a peer of the mesh, see holdsMeshPeer; a stranger's that is none does not count).
   */
  private async round (meshOnly = false): Promise<{ joined: number, rejoined: number }> {
    const signal = AbortSignal.any([this.ctl.signal, AbortSignal.timeout(BOOTSTRAP_DIAL_TIMEOUT_MS)])
    const results = await Promise.allSettled(this.addrs.map(async a => this.init.host.dial(a, { signal })))
    const failed = results.flatMap((r, i) => r.status === 'rejected' ? [`${String(this.addrs[i])}: ${messageOf(r.reason)}`] : [])
    results.forEach((r, i) => {
      // an address without /p2p/: the peer it reached is the one its connection is looked for by
      const peer: unknown = r.status === 'fulfilled' ? (r.value as { remotePeer?: unknown } | undefined)?.remotePeer : undefined
      if (this.ids[i] === undefined && peer !== undefined) this.ids[i] = String(peer)
    })
    const joined = results.length - failed.length
    if (failed.length > 0 && !this.ctl.signal.aborted) this.init.log.debug({ failed }, 'bootstrap dials failed')
    const held = meshOnly ? await this.holdsMeshPeer() : this.init.host.getConnections().length > 0
    if (joined === 0 && this.init.remembered !== undefined && !held && !this.ctl.signal.aborted) {
      const rejoined = await this.init.remembered(AbortSignal.any([this.ctl.signal, AbortSignal.timeout(BOOTSTRAP_DIAL_TIMEOUT_MS)]))
      if (rejoined > 0) {
        this.rejoined++
        this.init.log.info({ peers: rejoined }, this.addrs.length === 0 ? 'rejoined the mesh through peers remembered from before' : 'no bootstrap peer answered; rejoined the mesh through peers remembered from before')
      }
      return { joined, rejoined }
    }
    return { joined, rejoined: 0 }
  }

  private async run (wasJoined: boolean): Promise<void> {
    let joined = wasJoined
    let wait = BOOTSTRAP_RETRY_MIN_MS
    while (!this.ctl.signal.aborted) {
      const ok = await sleep(joined ? this.checkMs : wait, true, { signal: this.ctl.signal }).catch((err: unknown) => {
        if (!this.ctl.signal.aborted) this.init.log.warn({ err: messageOf(err) }, 'bootstrap wait failed')
        return false
      })
      if (!ok) return
      if (this.connected() > 0) {
        joined = true
        continue
      }
      // joined, and still holding most of its peers: the bootstrap peer closed the connection (its budget), not the network
      const held = this.init.host.getConnections().length
      const churn = joined && held > 0 && held * 2 > this.heldAtRedial
      if (churn && performance.now() < this.nextChurnRedial) {
        this.churnWaits++
        continue
      }
      if (!churn && this.nextChurnRedial > performance.now()) this.cutOffRedials++
      const { joined: answered, rejoined } = await this.round()
      // back in the mesh, though not through a bootstrap peer: said as a join; the bootstrap peers are still tried
      if (rejoined > 0) this.init.onJoined?.(rejoined)
      if (this.ctl.signal.aborted) return
      if (answered > 0 && churn) {
        this.churnRedials++
        this.failedRounds = 0
        this.heldAtRedial = this.init.host.getConnections().length
        this.nextChurnRedial = performance.now() + this.churnDelayMs
        this.init.log.debug({ next_ms: this.churnDelayMs }, 'dialed a bootstrap peer that had closed the connection again; the next such redial waits')
        this.churnDelayMs = Math.min(this.churnDelayMs * 2, this.churnMaxMs)
        continue
      }
      if (answered === 0 && churn) {
        // the bootstrap peer is gone but the node holds its peers: not cut off, so the next try waits too
        this.failedRounds++
        this.heldAtRedial = held
        this.nextChurnRedial = performance.now() + this.churnDelayMs
        this.init.log.debug({ next_ms: this.churnDelayMs }, 'a bootstrap peer did not answer while the node holds other peers; the next try waits')
        this.churnDelayMs = Math.min(this.churnDelayMs * 2, this.churnMaxMs)
        continue
      }
      // cut off (or a failed round): the next redial comes at once, and the churn wait starts over
      this.churnDelayMs = this.churnMinMs
      this.nextChurnRedial = 0
      this.heldAtRedial = 0
      if (answered > 0) {
        this.init.log.info({ peers: answered, after_rounds: this.failedRounds }, 'joined through bootstrap peers')
        this.failedRounds = 0
        wait = BOOTSTRAP_RETRY_MIN_MS
        joined = true
        this.init.onJoined?.(answered)
      } else {
        if (joined) this.init.log.warn('no bootstrap peer is connected; dialing them again with backoff')
        joined = false
        this.failedRounds++
        wait = Math.min(wait * 2, BOOTSTRAP_RETRY_MAX_MS)
      }
    }
  }

  /**
   * Whether the node holds a connection into the mesh: one it opened itself, or one to a peer that serves the DHT
   * (identify said so), whichever side opened it (a seed's peers dial it; a remembered peer may have). A stranger's
   * connection that is neither (a scanner) does not count. Without a peer store (a stand-in host), any connection.
   */
  private async holdsMeshPeer (): Promise<boolean> {
    const conns = this.init.host.getConnections()
    if (conns.some(c => c.direction === 'outbound')) return true
    const store = (this.init.host as Partial<Pick<Libp2p, 'peerStore'>>).peerStore
    if (store === undefined) return conns.length > 0
    for (const c of conns.slice(0, BOOTSTRAP_MESH_PEER_CHECKS_MAX)) {
      const peer = await store.get(c.remotePeer).catch(() => undefined)
      if (peer?.protocols.includes(DHT_PROTOCOL) === true) return true
    }
    return false
  }

  /**
   * The loop with no bootstrap address: while the node holds no connection into the mesh (holdsMeshPeer), the
   * remembered peers with the retry backoff. A rejoin is looked at again after the
   * check interval; one whose peers closed the connection by then waits the backoff, doubled, before the next round,
   * so a peer that takes the dial and closes it again is not redialed at every check.
   */
  private async runRemembered (): Promise<void> {
    this.retryWaitMs = BOOTSTRAP_RETRY_MIN_MS
    // a first round that reached nobody is followed by the retry backoff, not by a check interval
    let held = await this.holdsMeshPeer()
    let rejoinedLast = false
    while (!this.ctl.signal.aborted) {
      const ok = await sleep(held ? this.checkMs : this.retryWaitMs, true, { signal: this.ctl.signal }).catch((err: unknown) => {
        if (!this.ctl.signal.aborted) this.init.log.warn({ err: messageOf(err) }, 'bootstrap wait failed')
        return false
      })
      if (!ok) return
      if (await this.holdsMeshPeer()) {
        held = true
        rejoinedLast = false
        this.failedRounds = 0
        this.retryWaitMs = BOOTSTRAP_RETRY_MIN_MS
        continue
      }
      // nothing to dial is no failed round: a lone first node of a mesh waits for others to come to it
      const none = this.init.hasRemembered?.() === false
      if (held) {
        held = false
        if (rejoinedLast) {
          rejoinedLast = false
          this.retryWaitMs = Math.min(this.retryWaitMs * 2, BOOTSTRAP_RETRY_MAX_MS)
          continue
        }
        if (!none) this.init.log.info('no connection into the mesh; dialing the peers remembered from before with backoff')
      }
      if (none) continue
      const { rejoined } = await this.round(true)
      if (this.ctl.signal.aborted) return
      if (rejoined > 0) {
        this.failedRounds = 0
        held = true
        rejoinedLast = true
        this.init.onJoined?.(rejoined)
      } else {
        this.failedRounds++
        this.retryWaitMs = Math.min(this.retryWaitMs * 2, BOOTSTRAP_RETRY_MAX_MS)
      }
    }
  }
}

function messageOf (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}
