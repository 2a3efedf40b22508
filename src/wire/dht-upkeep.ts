/**
 * Forgetting routing-table contacts that are gone.
 *
 * kad-dht 16 takes a contact out of its routing table in one case only: a
 * full bucket pings its oldest contacts before it takes a new one, and drops
 * one that does not answer. Its table refresh never runs (RoutingTableRefresh
 * has no start(), so libp2p's start helper skips it), and a lookup that fails
 * to reach a contact does not remove it. So a peer that left the mesh stays a
 * contact for as long as its bucket has room, and every walk that comes near
 * its id dials it again: on loopback a refused connection, on a real network
 * a dial that runs to its address timeout while it holds one of the walk's
 * alpha places.
 *
 * This service watches the requests kad-dht sends (its network's
 * sendRequest). A request that fails, for a contact this node is not
 * connected to and not because the walk itself ended, makes the contact a
 * suspect: the service checks suspects one at a time, and pings each that is
 * still a contact and still not connected (its own dial, with its own
 * timeout: a request cut by kad-dht's per-request timeout is no proof). A
 * contact that does not answer is removed; it comes back like any other peer,
 * once it connects and announces the DHT protocol again. The table is never
 * brought below DHT_UPKEEP_TABLE_FLOOR by it: when this node is the one cut
 * off, every request fails, and the contacts it keeps are where its walks
 * start once it is back.
 *
 * (libp2p's own record of a failed dial, the peer-store metadata
 * `last-dial-failure`, sends no `peer:update`: the peer store merges metadata
 * into the map of the record it compares against, so the two look equal.)
 */
import { serviceCapabilities, type AbortOptions, type ComponentLogger, type Logger, type PeerId, type Startable } from '@libp2p/interface'
import type { Ping } from '@libp2p/ping'
import { reasonOf } from '../errors.ts'
import { DHT_UPKEEP_PING_TIMEOUT_MS, DHT_UPKEEP_SUSPECTS_MAX, DHT_UPKEEP_TABLE_FLOOR } from './network-constants.ts'
import { kadMember } from './kad-internals.ts'

export interface DhtUpkeepInit {
  /** A suspect's ping that has not answered in this long fails (default DHT_UPKEEP_PING_TIMEOUT_MS). */
  pingTimeoutMs?: number
  /** Suspects waiting at most; more are counted in `dropped` (default DHT_UPKEEP_SUSPECTS_MAX). */
  suspectsMax?: number
  /** Contacts the upkeep leaves in the table at least (default DHT_UPKEEP_TABLE_FLOOR). */
  tableFloor?: number
  /**
   * Called before a contact is removed. The host has the liveness ping
   * (dht-contacts.ts) forget that the peer's connection closed a moment ago,
   * which would otherwise let a peer still named by others back into the
   * table without a ping.
   */
  forget?: (peer: PeerId) => void
}

export interface DhtUpkeepComponents {
  connectionManager: { getConnections: (peer?: PeerId) => Array<{ status: string }> }
  ping: Ping
  /** kad-dht, declared before this service; its routing table is read through routingTableOf. */
  dht: object
  logger: ComponentLogger
}

export interface DhtUpkeepStats {
  /** Contacts suspected (a request to them failed while not connected) and checked. */
  checked: number
  /** Of those, contacts that did not answer their ping and were removed. */
  removed: number
  /** Of those, contacts that answered (or connected meanwhile) and stay. */
  kept: number
  /** Suspects not checked: the table was at its floor. */
  atFloor: number
  /** Suspects not queued because DHT_UPKEEP_SUSPECTS_MAX were waiting. */
  dropped: number
  /** Checks that failed for another reason than the ping (the table refused the removal), each logged. */
  failures: number
}

/** What the upkeep needs of kad-dht's routing table. */
interface Table {
  size: number
  find: (peer: PeerId) => Promise<PeerId | undefined>
  remove: (peer: PeerId) => Promise<void>
}

/** kad-dht's network: every request to another peer goes through `sendRequest`, which yields QUERY_ERROR when it fails. */
type SendRequest = (to: PeerId, msg: unknown, options?: AbortOptions) => AsyncGenerator<{ name: string }>
interface Network { sendRequest: SendRequest }

export class DhtUpkeep implements Startable {
  readonly [Symbol.toStringTag] = 'aap:dht-upkeep'
  readonly [serviceCapabilities]: string[] = []
  readonly stats: DhtUpkeepStats = { checked: 0, removed: 0, kept: 0, atFloor: 0, dropped: 0, failures: 0 }
  private readonly components: DhtUpkeepComponents
  private readonly pingTimeoutMs: number
  private readonly suspectsMax: number
  private readonly tableFloor: number
  private readonly forget: ((peer: PeerId) => void) | undefined
  private readonly log: Logger
  /** Suspects by peer id, in the order they came; the one being checked stays until its check ends. */
  private readonly suspects = new Map<string, PeerId>()
  private draining?: Promise<void>
  private stopping?: AbortController
  private unhook?: () => void

  constructor (components: DhtUpkeepComponents, init: DhtUpkeepInit = {}) {
    this.components = components
    this.pingTimeoutMs = init.pingTimeoutMs ?? DHT_UPKEEP_PING_TIMEOUT_MS
    this.suspectsMax = init.suspectsMax ?? DHT_UPKEEP_SUSPECTS_MAX
    this.tableFloor = init.tableFloor ?? DHT_UPKEEP_TABLE_FLOOR
    this.forget = init.forget
    this.log = components.logger.forComponent('aap:wire:dht-upkeep')
  }

  start (): void {
    this.stopping = new AbortController()
    const network = kadMember<Network>(this.components.dht, 'network', ['sendRequest'])
    if (network === undefined) {
      this.log.error('kad-dht has no network to watch (another version?): contacts that left stay in the routing table')
      return
    }
    const original = network.sendRequest
    const suspect = (peer: PeerId): void => { this.suspect(peer) }
    const watched: SendRequest = async function * (this: Network, to, msg, options) {
      for await (const event of Reflect.apply(original, this, [to, msg, options]) as AsyncGenerator<{ name: string }>) {
        // a request cut because its walk ended says nothing of the peer
        if (event.name === 'QUERY_ERROR' && options?.signal?.aborted !== true) suspect(to)
        yield event
      }
    }
    network.sendRequest = watched
    this.unhook = () => { if (network.sendRequest === watched) network.sendRequest = original }
  }

  async stop (): Promise<void> {
    this.unhook?.()
    this.unhook = undefined
    this.stopping?.abort()
    while (this.draining !== undefined) await this.draining
    this.suspects.clear()
  }

  /** Resolves once every suspect queued so far was checked (tests and the simulation wait on it). */
  async settled (): Promise<void> {
    while (this.draining !== undefined) await this.draining
  }

  /** A request to `peer` failed: check it (queued, one at a time) unless it is connected. */
  suspect (peer: PeerId): void {
    if (this.stopped() || this.connected(peer)) return
    const key = peer.toString()
    if (this.suspects.has(key)) return
    if (this.suspects.size >= this.suspectsMax) {
      this.stats.dropped++
      return
    }
    this.suspects.set(key, peer)
    this.kick()
  }

  /** Start draining unless a drain runs; a suspect queued as one ends (after its loop, before this resets) starts the next. */
  private kick (): void {
    if (this.draining !== undefined) return
    this.draining = this.drain().finally(() => {
      this.draining = undefined
      if (this.suspects.size > 0 && !this.stopped()) this.kick()
    })
  }

  private stopped (): boolean {
    return this.stopping?.signal.aborted === true
  }

  private connected (peer: PeerId): boolean {
    return this.components.connectionManager.getConnections(peer).some(c => c.status === 'open')
  }

  private async drain (): Promise<void> {
    const signal = this.stopping?.signal
    for (const [key, peer] of this.suspects) {
      if (this.stopped()) return
      try {
        await this.check(peer, signal)
      } catch (err) {
        if (this.stopped()) return
        this.stats.failures++
        this.log.error('the check of contact %s failed: %s', key, reasonOf(err))
      } finally {
        this.suspects.delete(key)
      }
    }
  }

  /** Whether the check of `peer` ends here (counted): the table is at its floor, or the peer is connected (alive). */
  private endsHere (table: Table, peer: PeerId): boolean {
    if (table.size <= this.tableFloor) {
      this.stats.atFloor++
      return true
    }
    if (this.connected(peer)) {
      this.stats.kept++
      return true
    }
    return false
  }

  private async check (peer: PeerId, stopping: AbortSignal | undefined): Promise<void> {
    const table = kadMember<Table>(this.components.dht, 'routingTable', ['find', 'remove'])
    if (table === undefined || await table.find(peer) === undefined) return
    this.stats.checked++
    if (this.endsHere(table, peer)) return
    const timeout = AbortSignal.timeout(this.pingTimeoutMs)
    let reason: string
    try {
      await this.components.ping.ping(peer, { signal: stopping === undefined ? timeout : AbortSignal.any([stopping, timeout]) })
      this.stats.kept++
      return
    } catch (err) {
      if (stopping?.aborted === true) throw err
      reason = reasonOf(err)
    }
    // checked again: the wait may have let the table shrink, or the peer connect
    if (this.endsHere(table, peer)) return
    this.forget?.(peer)
    await table.remove(peer)
    this.stats.removed++
    this.log('contact %s removed from the routing table: a DHT request to it failed, then its ping (%s)', peer.toString(), reason)
  }
}

/** The libp2p service, declared after kad-dht (`dht`) and ping: `services: { dhtUpkeep: dhtUpkeep() }`. */
export function dhtUpkeep (init: DhtUpkeepInit = {}): (components: DhtUpkeepComponents) => DhtUpkeep {
  return (components) => new DhtUpkeep(components, init)
}
