/**
 * The connection budget: a node keeps at most `max` open connections
 * (CONNECTIONS_MAX by default), whatever the size of the mesh. Above it, the
 * connections worth least are closed: value is the sum of the peer's tags
 * (kad-dht tags its closest peers, the run service the peers it has live runs
 * with) plus GOSSIP_MESH_LINK_WORTH for each topic on which the peer is in this
 * node's gossip mesh (read from gossipsub at each round; gossipsub's own
 * peer-store tags are off, host.ts), then the newest go first. A connection
 * younger than the grace period
 * (CONNECTION_GRACE_MS) is not closed yet, so the request it was opened for is
 * answered; a round that ends over the budget for that reason comes back when
 * the oldest such connection is out of grace. A peer with live runs
 * (RUN_PEER_TAG) is never closed, so
 * a node with more run peers than its budget stays over it (counted in
 * `stats.overBudget`) rather than break a run. One-off DHT lookups and card
 * fetches leave untagged connections, the first to go.
 *
 * A connection that carries a request in flight (in-flight.ts: a delegation,
 * a control call, a card fetch, a stream this node opened still negotiating) is not closed
 * either, whatever its value: cutting it fails the request although both
 * peers are up. It is looked at again at the next round (a connection
 * opening, one leaving its grace, or BUDGET_BUSY_RECHECK_MS later). A peer
 * whose run tag this node has just written is a run peer at once, before the
 * peer store has it, so a round that read the tags a moment earlier does not
 * close the connection of a delegation that was just answered.
 *
 * A peer with a `keep-alive` tag is redialed by libp2p's reconnect queue when
 * its connection closes. kad-dht's closest peers no longer get one
 * (dht-keepalive.ts: its `kad-close` value stays); for any other keep-alive
 * tag (a relay's, say) the budget wins: a pruned peer loses its keep-alive
 * tags first, or it would be redialed at once and the two would fight forever.
 *
 * Past the hard limit (the bound plus CONNECTIONS_HEADROOM, where libp2p
 * refuses inbound connections), grace no longer protects a connection whose
 * open streams are only long-lived ones (gossip, identify, ping) or a step of
 * a DHT query: inbound connections accepted together and this node's own
 * dials (DHT walks, card fetches) can take a node past that limit, and waiting
 * out the grace left nodes of a 500-node simulation at up to 153 connections
 * for seconds (and, while DHT steps were kept, at 130). A young connection
 * with any other stream open (a card fetch, a run request) is still kept.
 *
 * Relays. A relayed connection rides on a connection to its relay: closing
 * that one closes every relayed connection on it. So a connection to a relay
 * that carries a relayed connection the budget would keep (a run peer's, one
 * with a request in flight) is kept too; the relay is the /p2p/<relay> before
 * /p2p-circuit in the relayed connection's address. The connection to a relay
 * this node holds a reservation on is worth RELAY_RESERVATION_WORTH (its
 * address is how others reach a private node), and on the relay the
 * connection of a peer holding one of its reservations is kept
 * (RELAY_MAX_RESERVATIONS, half the budget); the hop and stop streams this
 * node opened count as requests in flight (in-flight.ts). Before, a private node's
 * budget closed its relay connection under a live run, reserved again, and
 * closed it again (found by a review).
 *
 * libp2p's connection pruner does not do this: it leaves any connection with a
 * long-lived stream open (every gossipsub peer has one), and at its limit it
 * refuses inbound connections, new delegations included.
 */
import { KEEP_ALIVE, type Connection, type PeerId, type PeerStore, type PeerUpdate } from '@libp2p/interface'
import {
  BUDGET_BUSY_RECHECK_MS, BUDGET_TAG_CACHE_MS, CONNECTION_CLOSE_TIMEOUT_MS, CONNECTIONS_HEADROOM, CONNECTION_GRACE_MS, DHT_PROTOCOL, GOSSIP_MESH_LINK_WORTH, RUN_PEER_TAG, RUN_PEER_TAG_RENEW_MAX_PEERS, RUN_PEER_TAG_RENEW_MS, RUN_PEER_TAG_TTL_MS, RUN_PEER_TAG_VALUE
} from '../constants.ts'
import type { Logger } from '../logger.ts'
import { isRelayed } from './connection-facts.ts'
import type { MeshHost } from './host.ts'
import { carriesRequest } from './in-flight.ts'
import { relayServiceOf } from './network.ts'
import { RELAY_RESERVATION_WORTH } from './network-constants.ts'

/** circuit-relay's tag on a relay this node holds a reservation on (the library does not export its name). */
const RELAY_RESERVATION_TAG = `${KEEP_ALIVE}-circuit-relay`

/** The relay a relayed connection rides on: the last /p2p/ before /p2p-circuit in its address (undefined: not relayed). */
export function relayOf (conn: Pick<Connection, 'remoteAddr'>): string | undefined {
  if (!isRelayed(conn)) return undefined
  let relay: string | undefined
  for (const c of conn.remoteAddr.getComponents()) {
    if (c.name === 'p2p-circuit') return relay
    if (c.name === 'p2p') relay = c.value
  }
  return undefined
}

export interface BudgetStats {
  /** Connections closed to keep under the budget. */
  pruned: number
  /** Prune rounds that ended over the budget because every remaining connection was protected. */
  overBudget: number
  /** Tag reads or connection closes that failed (logged). */
  errors: number
  /** Connections a round would have closed but kept because a request was in flight on them. */
  keptInFlight: number
  /** Of `pruned`, connections closed in their grace period because the node was past its hard limit. */
  prunedInGrace: number
}

/** Whether this process has logged, once, that gossipsub does not show its mesh (meshLinks). */
let warnedNoMesh = false

/**
 * Streams a young connection past the hard limit may lose: those that stay
 * open for the life of a connection, not for a request (gossip, identify,
 * ping), and one step of a DHT query (the mesh's own kad protocol). A query
 * that loses a peer goes on with the others it knows; a run request never
 * loses its connection this way.
 */
const CLOSABLE_PROTOCOL_PREFIXES = ['/meshsub/', '/floodsub/', '/ipfs/id/', '/ipfs/ping/', DHT_PROTOCOL]

/** Whether every open stream of the connection may be lost past the hard limit (no run request under way). */
function onlyClosableStreams (conn: Pick<Connection, 'streams'>): boolean {
  // a stream the peer opened and has not negotiated yet holds nothing of ours (in-flight.ts)
  return conn.streams.every(s => s.status !== 'open' || (s.protocol === '' && s.direction === 'inbound') || CLOSABLE_PROTOCOL_PREFIXES.some(p => s.protocol.startsWith(p)))
}

/**
 * When each host last wrote the run tag of each peer (ms), oldest first. Keyed
 * by the peer store: the run service may see the host through a proxy
 * (network.ts) while the budget holds the host itself.
 */
const tagged = new WeakMap<PeerStore, Map<string, number>>()

/** Whether this node wrote `peer`'s run tag recently enough that it is still live (true before the write lands). */
function taggedNow (host: Pick<MeshHost, 'peerStore'>, peer: string, now: number): boolean {
  const at = tagged.get(host.peerStore)?.get(peer)
  return at !== undefined && now - at < RUN_PEER_TAG_TTL_MS
}

/**
 * Mark `peer` as one this node has live runs with: its connection is kept
 * (renewed by each call, written at most once per RUN_PEER_TAG_RENEW_MS).
 */
export function tagRunPeer (host: MeshHost, peer: PeerId, log: Logger): void {
  let last = tagged.get(host.peerStore)
  if (last === undefined) {
    last = new Map()
    tagged.set(host.peerStore, last)
  }
  const id = peer.toString()
  const now = Date.now()
  const at = last.get(id)
  if (at !== undefined && now - at < RUN_PEER_TAG_RENEW_MS) return
  last.delete(id)
  if (last.size >= RUN_PEER_TAG_RENEW_MAX_PEERS) {
    const oldest = last.keys().next()
    if (oldest.done !== true) last.delete(oldest.value)
  }
  last.set(id, now)
  host.peerStore.merge(peer, { tags: { [RUN_PEER_TAG]: { value: RUN_PEER_TAG_VALUE, ttl: RUN_PEER_TAG_TTL_MS } } }).catch((err: unknown) => {
    // the next call writes it again
    if (last.get(id) === now) last.delete(id)
    log.warn({ err, peer: id }, 'a run peer could not be tagged: its connection may be pruned (runs redial)')
  })
}

/**
 * Whether `conn` carries work with its peer that closing it would cut: a
 * request in flight, a stream that is more than gossip, identify, ping or a
 * DHT step (a run's, an artifact's, a relayed circuit's), or a peer this
 * node has live runs with (its run tag). A connection closed for a reason of
 * its own (a relay that stops serving, reachability.ts) is left open then.
 */
export async function carriesLiveWork (host: Pick<MeshHost, 'peerStore'>, conn: Connection): Promise<boolean> {
  if (carriesRequest(conn) || !onlyClosableStreams(conn) || taggedNow(host, conn.remotePeer.toString(), Date.now())) return true
  if (!(await host.peerStore.has(conn.remotePeer))) return false
  return (await host.peerStore.get(conn.remotePeer)).tags.has(RUN_PEER_TAG)
}

/** What a peer's tags are worth to the budget, and when they were read (ms). */
interface PeerWorth { sum: number, runs: boolean, keepAlive: string[], at: number }

function worthOfTags (tags: Map<string, { value: number }>, at: number): PeerWorth {
  let sum = 0
  let runs = false
  const keepAlive: string[] = []
  for (const [name, tag] of tags) {
    sum += tag.value
    if (name === RUN_PEER_TAG) runs = true
    if (name === RELAY_RESERVATION_TAG) sum += RELAY_RESERVATION_WORTH
    if (name.startsWith(KEEP_ALIVE)) keepAlive.push(name)
  }
  return { sum, runs, keepAlive, at }
}

export class ConnectionBudget {
  readonly stats: BudgetStats = { pruned: 0, overBudget: 0, errors: 0, keptInFlight: 0, prunedInGrace: 0 }
  private bound: number
  readonly graceMs: number
  private readonly host: MeshHost
  private again?: ReturnType<typeof setTimeout>
  private readonly log: Logger
  private scheduled = false
  private pending = false
  private running: Promise<void> | undefined
  private stopped = false
  /**
   * Tag worth of the peers this node is connected to, kept current by the peer
   * store's `peer:update` events and read again after BUDGET_TAG_CACHE_MS (a
   * tag's TTL ends without an event). Without it, every connection opened
   * read the tags of every connection: in a 40-node mesh over its budget that
   * was over half of all peer-store reads.
   */
  private readonly worth = new Map<string, PeerWorth>()

  /** Connections above the bound up to the hard limit (libp2p refuses inbound ones there, host.ts). */
  readonly headroom: number

  constructor (host: MeshHost, max: number, log: Logger, graceMs = CONNECTION_GRACE_MS, headroom = CONNECTIONS_HEADROOM) {
    this.host = host
    this.headroom = headroom
    this.bound = max
    this.graceMs = graceMs
    this.log = log
  }

  /** The open connections the node keeps. */
  get max (): number {
    return this.bound
  }

  /** Change the bound at run time; the node is trimmed to it at once (connections in grace when they leave it). */
  setMax (max: number): void {
    if (!Number.isInteger(max) || max < 1) throw new RangeError('the connection budget is a whole number of at least 1')
    this.bound = max
    this.onOpen()
  }

  start (): void {
    this.host.addEventListener('connection:open', this.onOpen)
    this.host.addEventListener('peer:update', this.onPeerUpdate)
  }

  async stop (): Promise<void> {
    this.stopped = true
    clearTimeout(this.again)
    this.host.removeEventListener('connection:open', this.onOpen)
    this.host.removeEventListener('peer:update', this.onPeerUpdate)
    await this.running
    this.worth.clear()
  }

  /** A connection opened: trim once the current turn of the event loop is over (a burst of opens is one round). */
  private readonly onOpen = (): void => {
    if (this.scheduled || this.stopped) return
    this.scheduled = true
    setImmediate(() => {
      this.scheduled = false
      if (this.stopped) return
      if (this.running !== undefined) {
        // a round is under way: one more comes right after it, for what opened meanwhile
        this.pending = true
        return
      }
      this.running = this.prune().finally(() => {
        this.running = undefined
        if (this.pending) {
          this.pending = false
          this.onOpen()
        }
      })
    })
  }

  /** A peer's record changed: a peer already valued is valued again from its new tags (others are read when needed). */
  private readonly onPeerUpdate = (evt: CustomEvent<PeerUpdate>): void => {
    const id = evt.detail.peer.id.toString()
    if (this.worth.has(id)) this.worth.set(id, worthOfTags(evt.detail.peer.tags, Date.now()))
  }

  private async worthOf (peer: PeerId, now: number): Promise<PeerWorth> {
    const id = peer.toString()
    const known = this.worth.get(id)
    if (known !== undefined && now - known.at < BUDGET_TAG_CACHE_MS) return known
    let w: PeerWorth = { sum: 0, runs: false, keepAlive: [], at: now }
    try {
      w = worthOfTags((await this.host.peerStore.get(peer)).tags, now)
    } catch (err) {
      if ((err as Error).name !== 'NotFoundError') {
        this.stats.errors++
        this.log.warn({ err, peer: id }, 'the tags of a peer could not be read: its connection counts as worth nothing')
        // not kept: the next round reads it again
        return w
      }
    }
    this.worth.set(id, w)
    return w
  }

  /** Drop the worth of peers this node is no longer connected to (the map stays as small as the connection list). */
  private forgetGone (conns: Connection[]): void {
    if (this.worth.size <= conns.length) return
    const open = new Set(conns.map(c => c.remotePeer.toString()))
    for (const id of this.worth.keys()) if (!open.has(id)) this.worth.delete(id)
  }

  /** Per peer, the topics on which it is in this node's gossip mesh (at most MAX_CORRELATION_TOPICS topics of a bounded mesh each). */
  private meshLinks (): Map<string, number> {
    const links = new Map<string, number>()
    const pubsub = this.host.services.pubsub
    // the GossipSub class has it; its exported interface does not declare it
    const meshOf = (pubsub as Partial<{ getMeshPeers: (topic: string) => string[] }>).getMeshPeers
    if (typeof meshOf !== 'function') {
      this.stats.errors++
      if (!warnedNoMesh) {
        warnedNoMesh = true
        this.log.warn('gossipsub does not expose getMeshPeers: mesh links count as worth nothing')
      }
      return links
    }
    for (const topic of pubsub.getTopics()) {
      for (const peer of meshOf.call(pubsub, topic)) links.set(peer, (links.get(peer) ?? 0) + 1)
    }
    return links
  }

  /** Drop the keep-alive tags of a peer about to be pruned (libp2p redials a peer that has one). */
  private async dropKeepAlive (c: Connection, v: PeerWorth | undefined): Promise<void> {
    if (v === undefined || v.keepAlive.length === 0) return
    const drop = v.keepAlive
    v.keepAlive = []
    this.worth.delete(c.remotePeer.toString())
    try {
      await this.host.peerStore.merge(c.remotePeer, { tags: Object.fromEntries(drop.map(name => [name, undefined])) })
    } catch (err) {
      this.stats.errors++
      this.log.warn({ err, peer: c.remotePeer.toString() }, 'a pruned peer kept its keep-alive tag: libp2p may redial it')
    }
  }

  /** One round: close the least valuable connections until the node is back under its budget. */
  async prune (): Promise<void> {
    const conns = this.host.getConnections()
    if (conns.length <= this.max) return
    // busy now or at any point of the round (the tag reads below wait): a request answered meanwhile
    // may be a delegation whose run tag is being written
    const busy = new Set(conns.filter(carriesRequest))
    const now = Date.now()
    const young = (c: Connection): boolean => now - c.timeline.open < this.graceMs
    const inGrace = conns.filter(young)
    let excessHard = conns.length - (this.max + this.headroom)
    // only connections out of grace (past the hard limit, young ones with only closable streams too), to peers
    // not just tagged as run peers, may be closed: only their tags are read
    const closable = conns.filter(c => (!young(c) || (excessHard > 0 && onlyClosableStreams(c))) && !taggedNow(this.host, c.remotePeer.toString(), now))
    // past the hard limit, young ones held by a stream (a request, or one still negotiating its protocol) are
    // looked at again soon, not when their grace ends
    const heldInGrace = excessHard > 0 ? inGrace.filter(c => !onlyClosableStreams(c)).length : 0
    const value = new Map<string, PeerWorth>()
    // relayed connections are read too, young ones included: whether one is a run peer's decides whether its relay is kept
    for (const c of [...closable, ...conns.filter(c => relayOf(c) !== undefined)]) {
      const id = c.remotePeer.toString()
      if (!value.has(id)) value.set(id, await this.worthOf(c.remotePeer, now))
    }
    this.forgetGone(conns)
    const links = this.meshLinks()
    const worth = (c: Connection): number => {
      const id = c.remotePeer.toString()
      return (value.get(id)?.sum ?? 0) + (links.get(id) ?? 0) * GOSSIP_MESH_LINK_WORTH
    }
    const runPeer = (c: Connection): boolean => value.get(c.remotePeer.toString())?.runs === true || taggedNow(this.host, c.remotePeer.toString(), Date.now())
    const reservations = relayServiceOf(this.host)?.reservations
    // a peer holding a reservation on this relay is kept as a run peer is; a relay that carries a relayed connection
    // kept here, as one with a request in flight is (looked at again while it does)
    const held = (c: Connection): boolean => runPeer(c) || reservations?.has(c.remotePeer) === true
    const carriers = (): Set<string> => new Set(conns.filter(c => busy.has(c) || carriesRequest(c) || runPeer(c)).flatMap(c => relayOf(c) ?? []))
    let carrying = carriers()
    const kept = (c: Connection): boolean => held(c) || carrying.has(c.remotePeer.toString())
    // run peers checked again: a run tag may have been written while the reads above waited
    const candidates = closable
      .filter(c => !held(c))
      .sort((a, b) => worth(a) - worth(b) || b.timeline.open - a.timeline.open)
    let excess = conns.length - this.max
    let keptBusy = 0
    const chosen: Connection[] = []
    for (const c of candidates) {
      if (excess <= 0 || this.stopped) break
      // a young connection only while the node is past its hard limit
      const inItsGrace = young(c)
      if (inItsGrace && excessHard <= 0) continue
      if (inItsGrace && !onlyClosableStreams(c)) {
        // a query or request opened it a moment ago: looked at again once it has likely ended
        keptBusy++
        this.stats.keptInFlight++
        continue
      }
      if (busy.has(c) || carriesRequest(c) || kept(c)) {
        if (!held(c)) {
          keptBusy++
          this.stats.keptInFlight++
        }
        continue
      }
      excess--
      excessHard--
      chosen.push(c)
    }
    // a pruned peer loses its keep-alive tags first, or libp2p's reconnect queue redials it on close
    await Promise.all(chosen.map(async c => this.dropKeepAlive(c, value.get(c.remotePeer.toString()))))
    carrying = carriers()
    // closed together: one at a time, each waiting for the other side, a round took seconds under load and
    // the node stood past its bound (or its hard limit) meanwhile
    await Promise.all(chosen.map(async c => {
      // looked at again: the tag writes above waited, and a request or a run may have started on it
      if (this.stopped || carriesRequest(c) || kept(c)) {
        excess++
        if (!held(c)) {
          keptBusy++
          this.stats.keptInFlight++
        }
        return
      }
      this.stats.pruned++
      if (young(c)) this.stats.prunedInGrace++
      try {
        await c.close({ signal: AbortSignal.timeout(CONNECTION_CLOSE_TIMEOUT_MS) })
      } catch (err) {
        this.stats.errors++
        this.log.debug({ err, peer: c.remotePeer.toString() }, 'a pruned connection did not close in time: aborted')
        c.abort(err instanceof Error ? err : new Error(String(err)))
      }
    }))
    if (excess > 0 && (inGrace.length > 0 || keptBusy > 0) && !this.stopped) {
      const held = keptBusy + heldInGrace
      // back when the oldest connection in grace leaves it, or when a request kept in flight has likely
      // ended (BUDGET_BUSY_RECHECK_MS, shorter than the tag cache, so that round mostly reads no tags;
      // before the cache, a timer per busy node cost a 200-node simulation 70 % more CPU in peer-store reads)
      const graceEnds = inGrace.length > 0 ? Math.min(...inGrace.map(c => c.timeline.open)) + this.graceMs - now : Infinity
      const next = Math.min(graceEnds, held > 0 ? BUDGET_BUSY_RECHECK_MS : Infinity)
      clearTimeout(this.again)
      this.again = setTimeout(() => { this.onOpen() }, Math.max(next, 0) + 1)
      this.again.unref?.()
    }
    if (excess > 0) {
      this.stats.overBudget++
      this.log.debug({ connections: conns.length, max: this.max, keptBusy }, 'over the connection budget: every other connection carries live runs or a request in flight')
    }
  }
}
