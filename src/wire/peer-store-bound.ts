/**
 * A bound on the peers the peer store remembers.
 *
 * libp2p's peer store writes a record for every peer this node connects to,
 * is dialed by, or only tries to dial (a failed dial records its failure),
 * and deletes a record only when it reads it more than MAX_PEER_AGE (six
 * hours) after its last write with no address seen within the last hour. So
 * the count follows the peers met in six hours, not the mesh: a stranger that
 * connects with a new identity each time, or DHT answers that name peers which
 * do not exist, leave one record each, in memory on a node without a data dir
 * and on disk on one with it.
 *
 * This service counts the records' keys once per PEER_STORE_PRUNE_INTERVAL_MS
 * (no record decoded). Only past PEER_STORE_PEERS_MAX it reads every record
 * (the read itself deletes the expired ones, like every read of libp2p's)
 * and, while more than the bound are left, deletes those no part of the
 * node holds on to: a peer with an open connection or any tag stays (kad-dht
 * tags its routing table and closest peers, the connection budget the peers
 * that carry runs, the relay client its relays). Those never dialed with
 * success go first, then the longest since their last successful dial. What
 * goes is knowledge the node can learn again (the DHT finds a peer's
 * addresses when something needs them), never a promise it made.
 */
import { serviceCapabilities, type AbortOptions, type ComponentLogger, type Logger, type Peer, type PeerId, type PeerStore, type Startable } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'
import { reasonOf } from '../errors.ts'
import { PEER_STORE_PEERS_MAX, PEER_STORE_PRUNE_INTERVAL_MS } from './network-constants.ts'

/** Where libp2p's peer store keeps its records (@libp2p/peer-store NAMESPACE_COMMON), its own peer's among them. */
const PEERS_PREFIX = '/peers/'

/** libp2p's connection manager records a dial that succeeded under this metadata key (the time in ms, as text). */
const LAST_DIAL_SUCCESS_KEY = 'last-dial-success'

export interface PeerStoreBoundInit {
  /** Records kept at most after a pass (default PEER_STORE_PEERS_MAX). */
  maxPeers?: number
  /** Time between passes (default PEER_STORE_PRUNE_INTERVAL_MS). */
  intervalMs?: number
  /**
   * Whether a delete frees room now (default: always). The node says no while
   * its disk refuses writes: a delete would then only take a place of the
   * records peer-store-memory.ts keeps in memory, and free nothing.
   */
  writable?: () => boolean
}

export interface PeerStoreBoundComponents {
  peerStore: PeerStore
  datastore: Datastore
  peerId: PeerId
  connectionManager: { getConnections: (peer?: PeerId) => unknown[] }
  logger: ComponentLogger
}

export interface PeerStoreBoundStats {
  /** Records found by the last pass (its own peer's left out), before it deleted any (expired ones among them when it only counted). */
  records: number
  /** Records deleted past the bound since start. */
  pruned: number
  /** Passes since start. */
  passes: number
  /** Passes that failed (a read or a delete the store refused), each logged with its reason. */
  failures: number
  /** Passes over the bound that deleted nothing, or stopped, because the store refused writes then (`writable`). */
  heldBack: number
}

interface Candidate { peer: PeerId, lastDial: number }

export class PeerStoreBound implements Startable {
  readonly [Symbol.toStringTag] = 'aap:peer-store-bound'
  readonly [serviceCapabilities]: string[] = []
  readonly stats: PeerStoreBoundStats = { records: 0, pruned: 0, passes: 0, failures: 0, heldBack: 0 }
  readonly maxPeers: number
  private readonly intervalMs: number
  private readonly writable: () => boolean
  private readonly log: Logger
  private timer?: ReturnType<typeof setInterval>
  private running?: Promise<void>
  private stopping?: AbortController
  private readonly components: PeerStoreBoundComponents

  constructor (components: PeerStoreBoundComponents, init: PeerStoreBoundInit = {}) {
    this.components = components
    this.maxPeers = init.maxPeers ?? PEER_STORE_PEERS_MAX
    this.intervalMs = init.intervalMs ?? PEER_STORE_PRUNE_INTERVAL_MS
    this.writable = init.writable ?? (() => true)
    this.log = components.logger.forComponent('aap:wire:peer-store-bound')
  }

  start (): void {
    this.stopping = new AbortController()
    this.timer = setInterval(() => { void this.pass() }, this.intervalMs)
    this.timer.unref?.()
  }

  async stop (): Promise<void> {
    clearInterval(this.timer)
    this.timer = undefined
    this.stopping?.abort()
    await this.running
  }

  /** One pass now (one at a time: a call while one runs waits for it). Resolves once it ended; a failure is counted and logged. */
  async pass (): Promise<void> {
    if (this.running !== undefined) return this.running
    const signal = this.stopping?.signal
    if (signal?.aborted === true) return
    this.running = this.prune(signal === undefined ? {} : { signal }).catch((err: unknown) => {
      if (signal?.aborted === true) return
      this.stats.failures++
      this.log.error('a pass over the peer store failed: %s', reasonOf(err))
    }).finally(() => { this.running = undefined })
    return this.running
  }

  private async prune (options: AbortOptions): Promise<void> {
    this.stats.passes++
    // the keys alone first: a pass under the bound decodes nothing
    const self = `${PEERS_PREFIX}${this.components.peerId.toCID().toString()}`
    let keys = 0
    for await (const key of this.components.datastore.queryKeys({ prefix: PEERS_PREFIX }, options)) {
      if (key.toString() !== self) keys++
    }
    this.stats.records = keys
    if (keys <= this.maxPeers) return
    if (!this.writable()) {
      this.stats.heldBack++
      this.log('%d peer-store records, over the bound, kept while the store refuses writes', keys)
      return
    }
    const candidates: Candidate[] = []
    let records = 0
    // libp2p's read deletes the expired records on its way; a stop ends it (the query takes the signal)
    await this.components.peerStore.forEach((peer) => {
      records++
      if (peer.tags.size > 0 || this.components.connectionManager.getConnections(peer.id).length > 0) return
      candidates.push({ peer: peer.id, lastDial: lastDialOf(peer.metadata.get(LAST_DIAL_SUCCESS_KEY)) })
    }, options)
    this.stats.records = records
    let excess = records - this.maxPeers
    if (excess <= 0) return
    candidates.sort((a, b) => a.lastDial - b.lastDial)
    for (const c of candidates) {
      if (excess <= 0) break
      options.signal?.throwIfAborted()
      // the disk may fill during the pass: its first refused delete ends it
      if (!this.writable()) {
        this.stats.heldBack++
        this.log('%d peer-store records over the bound kept: the store refuses writes since this pass began', excess)
        return
      }
      // connected (or tagged) since the read: kept, and its place counted against another
      if (this.components.connectionManager.getConnections(c.peer).length > 0) continue
      const now = await this.current(c.peer, options)
      if (now === 'gone') { excess--; continue }
      if (now.tags.size > 0) continue
      await this.components.peerStore.delete(c.peer, options)
      this.stats.pruned++
      excess--
    }
    if (excess > 0) this.log('%d peer-store records over the bound are all connected or tagged: kept', excess)
  }

  /** The peer's record now, or 'gone' when a read deleted it as expired meanwhile. */
  private async current (peer: PeerId, options: AbortOptions): Promise<Peer | 'gone'> {
    try {
      return await this.components.peerStore.get(peer, options)
    } catch (err) {
      if (err instanceof Error && err.name === 'NotFoundError') return 'gone'
      throw err
    }
  }
}

/** When a peer was last dialed with success (ms), 0 when never or unreadable. */
function lastDialOf (value: Uint8Array | undefined): number {
  if (value === undefined) return 0
  const t = Number(new TextDecoder().decode(value))
  return Number.isFinite(t) ? t : 0
}

/** The libp2p service: `services: { peerStoreBound: peerStoreBound() }`. */
export function peerStoreBound (init: PeerStoreBoundInit = {}): (components: PeerStoreBoundComponents) => PeerStoreBound {
  return (components) => new PeerStoreBound(components, init)
}
