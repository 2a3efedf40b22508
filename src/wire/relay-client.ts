/**
 * The client side of Circuit Relay v2 (libp2p's relay transport), bounded.
 * A private node reserves slots on RELAY_CLIENT_RESERVATIONS relays; libp2p
 * as it comes:
 *
 * - searches for relays with a random walk that runs DHT lookups back to
 *   back for as long as the node holds fewer reservations than it wants:
 *   with one relay in reach that was over 200 lookups a second, forever, and
 *   a relay that closed each connection on open was dialed as often. Here
 *   the transport gets a walk of its own (PacedWalk, relay-walk.ts) that waits between
 *   lookups, from RELAY_DISCOVERY_BACKOFF_MIN_MS doubling to
 *   RELAY_DISCOVERY_BACKOFF_MAX_MS, and starts over when the node makes a
 *   new reservation, loses one, or meets a relay it had not seen;
 * - takes the addresses a relay names in its reservation as the node's own,
 *   however many: 400 made the identify message too large for any peer to
 *   read, and fresh ones at every renewal grew the address manager without
 *   end. Here the node keeps RELAY_ADDRS_PER_RESERVATION_MAX per relay (the
 *   one it reached the relay on first, whatever another relay named) and
 *   forgets those it withdrew;
 * - queues a reservation on any peer that speaks the hop protocol, one at a
 *   time: peers that dialed the node and never answered held its first
 *   reservation back by RELAY_RESERVATION_TIMEOUT_MS each. Here reservations
 *   run RELAY_RESERVATION_CONCURRENCY at once, of which at most
 *   RELAY_INBOUND_CANDIDATES_MAX on relays that dialed the node (the others
 *   wait their turn);
 * - never asks a relay again once a renewal failed, though the connection
 *   to it stays open. Here it does, after the discovery's current wait (at
 *   most RELAY_REASK_DELAY_MAX_MS);
 * - listens on any peer that opens a circuit STOP stream to the node without
 *   a reservation there: a 'configured' reservation, which the store does
 *   not bound, made even with the relay client off (25 peers made a node
 *   announce 100 circuit addresses, too many for identify; found by a
 *   review). Here the node listens only on relays the operator configured;
 *   the relayed connection itself is still taken.
 *
 * What it refused and what failed is counted (RelayClientStats).
 */
import { circuitRelayTransport, RELAY_V2_HOP_CODEC, type CircuitRelayTransportComponents, type CircuitRelayTransportInit } from '@libp2p/circuit-relay-v2'
import { KEEP_ALIVE, type Connection, type Logger, type PeerId, type Transport } from '@libp2p/interface'
import { getNetConfig, isNetworkAddress } from '@libp2p/utils'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import {
  RELAY_ADDRS_PER_RESERVATION_MAX, RELAY_CANDIDATES_SEEN_MAX, RELAY_DISCOVERY_BACKOFF_MIN_MS,
  RELAY_INBOUND_CANDIDATES_MAX, RELAY_REASK_DELAY_MAX_MS
} from './network-constants.ts'
import { PacedWalk, type PeerRoutingLike } from './relay-walk.ts'
import { hasCircuitPart, isRelayed } from './connection-facts.ts'

/** The peer-store tag the reservation store keeps a relay's connection open with (libp2p's KEEP_ALIVE_TAG, not exported). */
const RELAY_KEEP_ALIVE_TAG = `${KEEP_ALIVE}-circuit-relay`

export interface RelayClientStats {
  /** DHT lookups relay discovery ran since start. */
  lookups: number
  /** Of those, the ones that failed; the walk goes on after its wait. */
  lookupFailures: number
  /** Wait before the next lookup now (0: the next one runs at once). */
  backoffMs: number
  /** Times the wait started over: a reservation made or lost, or a relay not seen before. */
  backoffResets: number
  /** Reservations made (renewals not counted). */
  reservations: number
  /** Reservations renewed. */
  renewals: number
  /** Reservation attempts that failed: the relay could not be dialed, refused, or did not answer in time. */
  reservationsFailed: number
  /** Reservations lost: the connection to the relay closed, or a renewal failed. */
  reservationsRemoved: number
  /** Relays not asked for a slot at once: connected only over a relay, or they dialed the node while RELAY_INBOUND_CANDIDATES_MAX such were being asked (those wait their turn). */
  candidatesRefused: number
  /** Reservations lost while the connection to their relay stayed open, asked for again on that relay. */
  reasked: number
  /** Addresses relays named in reservations that the node did not take as its own: past RELAY_ADDRS_PER_RESERVATION_MAX, another peer's, one of its own or another relay's. */
  addrsDropped: number
  /** Withdrawn relay addresses the address manager forgot (it keeps them, unconfirmed, otherwise). */
  addrsForgotten: number
  /** Circuit addresses the announce filter held back at its last call (past RELAY_ADDRS_PER_RESERVATION_MAX per relay, or not kept). */
  announceHeldBack: number
  /** Relays not listened on (no slot reserved) that libp2p would have: a peer that opened a STOP stream without the node holding a reservation there, not one the operator configured. */
  stopListensRefused: number
}

type Components = CircuitRelayTransportComponents

interface ReservationDetails { connection: string, reservation: { addrs: Uint8Array[] } }

interface Reservation {
  relay: PeerId
  details: ReservationDetails
}

/** The members of libp2p's relay reservation store this module uses (not declared by the package). */
interface ReservationStoreLike {
  addRelay: (peer: PeerId, type: 'discovered' | 'configured') => Promise<Reservation>
  addEventListener: (type: string, fn: (evt: CustomEvent<Reservation>) => void) => void
  hasReservation: (peer: PeerId) => boolean
  stop: () => void
  reservations: { get: (peer: PeerId) => ReservationDetails | undefined }
}

function reservationStoreOf (transport: Transport): ReservationStoreLike | undefined {
  const store: unknown = Reflect.get(transport, 'reservationStore')
  if (typeof store !== 'object' || store === null) return undefined
  const s = store as Partial<Record<keyof ReservationStoreLike, unknown>>
  const map = s.reservations as { get?: unknown } | undefined
  return typeof s.addRelay === 'function' && typeof s.addEventListener === 'function' && typeof s.hasReservation === 'function' &&
    typeof s.stop === 'function' && typeof map?.get === 'function'
    ? store as ReservationStoreLike
    : undefined
}

/** The address manager's map of transport addresses, keyed as libp2p keys it; undefined when its shape changed. */
function transportAddressesOf (components: Components): { remove: (ma: Multiaddr) => unknown } | undefined {
  const t: unknown = Reflect.get(components.addressManager, 'transportAddresses')
  return typeof t === 'object' && t !== null && typeof Reflect.get(t, 'remove') === 'function' ? t as { remove: (ma: Multiaddr) => unknown } : undefined
}

/** How libp2p's address manager keys a network address (host, port, protocol); the whole address otherwise. */
export function addressKey (ma: Multiaddr): string {
  if (!isNetworkAddress(ma)) return ma.toString()
  const c = getNetConfig(ma)
  return `${c.host}-${c.port ?? ''}-${c.protocol ?? ''}`
}

/**
 * libp2p's keys of this node's direct addresses. Its circuit addresses are
 * left out: one shares its key with the relay address it was made of, so a
 * renewal that names the same addresses would collide with itself.
 */
function ownKeys (components: Components): Set<string> {
  return new Set(components.transportManager.getAddrs().filter(a => !hasCircuitPart(a)).map(addressKey))
}

/** Whether this node holds a connection to the peer that is open, direct and not limited (`outbound`: one it dialed). */
function direct (conns: Connection[], outbound = false): boolean {
  return conns.some(c => c.status === 'open' && (!outbound || c.direction === 'outbound') && c.limits === undefined && !isRelayed(c))
}

/** A relay candidate not asked now, named as libp2p's queue-full error: the transport logs any other at error level, per peer. */
class RelayCandidateRefusedError extends Error {
  override name = 'RelayQueueFullError'
}

/** A reservation that left the node no address of the relay to take: the store frees its slot on this. */
class RelayReservationUnusableError extends Error {
  override name = 'RelayReservationUnusableError'
}

/** The relay addresses to take from a reservation, and those another relay named that it gives up. */
interface AddressPlan {
  keep: Multiaddr[]
  dropped: number
  /** Per other relay, its kept circuit addresses that share their key with the address the node reached this relay on. */
  yielded: Map<string, Multiaddr[]>
  via?: string
}

/** A relay client's counters before it has done anything: what a host without one reports. */
export const NO_RELAY_CLIENT_STATS: Readonly<RelayClientStats> = Object.freeze({
  lookups: 0, lookupFailures: 0, backoffMs: 0, backoffResets: 0, reservations: 0, renewals: 0, reservationsFailed: 0, reservationsRemoved: 0,
  candidatesRefused: 0, reasked: 0, addrsDropped: 0, addrsForgotten: 0, announceHeldBack: 0, stopListensRefused: 0
})

export class RelayClient {
  readonly stats: RelayClientStats = { ...NO_RELAY_CLIENT_STATS }

  /** The circuit addresses (with /p2p-circuit) the node keeps per relay, by relay peer id. */
  private readonly kept = new Map<string, Multiaddr[]>()
  /** libp2p's key of the address the node reached each relay on, by relay peer id. */
  private readonly vias = new Map<string, string>()
  /** Relay candidates that dialed the node being asked for a slot now, at most RELAY_INBOUND_CANDIDATES_MAX. */
  private readonly inboundAsked = new Set<string>()
  /** Those waiting their turn, oldest first, at most RELAY_CANDIDATES_SEEN_MAX. */
  private readonly inboundWaiting = new Map<string, PeerId>()
  /** Timers asking a relay again after a lost reservation; cleared when the store stops. */
  private readonly reasks = new Set<ReturnType<typeof setTimeout>>()
  /** Relays whose last reservation left no address to take: not asked again at once (the walk may meet them again). */
  private readonly unusable = new Set<string>()
  /** Relays met (identified as speaking hop) since start, up to RELAY_CANDIDATES_SEEN_MAX, then forgotten all at once. */
  private readonly seen = new Set<string>()
  private walk?: PacedWalk

  /** The relay transport, with its walk, reservation store and addresses bounded as the module comment says. */
  transport (init: CircuitRelayTransportInit): (components: Components) => Transport {
    const factory = circuitRelayTransport(init)
    return (components) => {
      const logger = components.logger.forComponent('aap:relay-client')
      const walk = this.walk = new PacedWalk(() => Reflect.get(components, 'peerRouting') as PeerRoutingLike, this.stats, (msg, err) => { logger.error('%s - %e', msg, err) })
      let store: ReservationStoreLike | undefined
      const peerStore = this.keepAliveCheck(components, () => store)
      const transportManager = this.operatorRelaysOnly(components, logger)
      const replaced: Partial<Record<string | symbol, unknown>> = { randomWalk: walk, peerStore, transportManager }
      const transport = factory(new Proxy(components, {
        get: (target, prop) => replaced[prop] ?? Reflect.get(target, prop)
      }))
      store = reservationStoreOf(transport)
      if (store === undefined) {
        logger.error('the relay transport has no reservation store of the known shape; its reservations are not bounded here')
        return transport
      }
      this.guard(store, components, logger)
      // a relay met on a connection this node dialed (one that dialed it restarts no wait: anyone can dial)
      components.events.addEventListener('peer:identify', (evt) => {
        const { peerId, protocols, connection } = evt.detail
        if (connection.direction !== 'outbound' || !protocols.includes(RELAY_V2_HOP_CODEC) || this.seen.has(peerId.toString())) return
        if (this.seen.size >= RELAY_CANDIDATES_SEEN_MAX) this.seen.clear()
        this.seen.add(peerId.toString())
        walk.reset()
      })
      return transport
    }
  }

  /**
   * The transport manager as the relay transport sees it: its listen takes
   * no circuit address but those the operator configured (the node's listen
   * addresses). The transport calls it only for a peer that opened a STOP
   * stream without the node holding a reservation on it (module comment).
   */
  private operatorRelaysOnly (components: Components, logger: Logger): Components['transportManager'] {
    const manager = components.transportManager
    const listen: Components['transportManager']['listen'] = async (addrs) => {
      const configured = components.addressManager.getListenAddrs()
      const ok = addrs.filter(a => !hasCircuitPart(a) || configured.some(c => c.equals(a)))
      if (ok.length < addrs.length) {
        this.stats.stopListensRefused += addrs.length - ok.length
        logger('not listening on a relay the operator did not configure: %s', addrs.filter(a => !ok.includes(a)).join(' '))
      }
      if (ok.length > 0) await manager.listen(ok)
    }
    return new Proxy(manager, {
      get: (target, prop) => {
        if (prop === 'listen') return listen
        const v: unknown = Reflect.get(target, prop)
        return typeof v === 'function' ? v.bind(target) : v
      }
    })
  }

  /**
   * The peer store as the reservation store sees it. Tagging a new
   * reservation's relay is the store's last step before it announces the
   * reservation, and a failure there makes it drop the reservation and free
   * its slot: a reservation that leaves no relay address to take fails here,
   * so it holds no slot the node cannot use. (The store offers no other way
   * to drop one; throwing from its event listeners reaches no one.)
   */
  private keepAliveCheck (components: Components, store: () => ReservationStoreLike | undefined): Components['peerStore'] {
    const peerStore = components.peerStore
    const merge: Components['peerStore']['merge'] = async (peer, data, options) => {
      const tags = data.tags
      const details = tags !== undefined && !(tags instanceof Map) && tags[RELAY_KEEP_ALIVE_TAG] !== undefined ? store()?.reservations.get(peer) : undefined
      if (details !== undefined && this.plan(peer, details, components).keep.length === 0) {
        this.unusable.add(peer.toString())
        throw new RelayReservationUnusableError('the relay named no address this node can take as its own')
      }
      return peerStore.merge(peer, data, options)
    }
    return new Proxy(peerStore, {
      get: (target, prop) => {
        if (prop === 'merge') return merge
        const v: unknown = Reflect.get(target, prop)
        return typeof v === 'function' ? v.bind(target) : v
      }
    })
  }

  private guard (store: ReservationStoreLike, components: Components, logger: Logger): void {
    const addRelay = store.addRelay.bind(store)
    // an own property: the store's renewals call this.addRelay, so they pass here too
    store.addRelay = async (peer, type) => {
      const id = peer.toString()
      const conns = components.connectionManager.getConnections(peer)
      const fresh = type === 'discovered' && !store.hasReservation(peer) && conns.length > 0
      if (fresh && !direct(conns)) {
        this.stats.candidatesRefused++
        throw new RelayCandidateRefusedError('not reserving on a relay this node reaches only over a relay')
      }
      // a peer that dialed the node may never answer: only so many of those are asked at once
      const inbound = fresh && !direct(conns, true) && !this.inboundAsked.has(id)
      if (inbound && this.inboundAsked.size >= RELAY_INBOUND_CANDIDATES_MAX) {
        this.stats.candidatesRefused++
        this.inboundWaiting.delete(id)
        if (this.inboundWaiting.size >= RELAY_CANDIDATES_SEEN_MAX) this.inboundWaiting.delete(this.inboundWaiting.keys().next().value ?? '')
        this.inboundWaiting.set(id, peer)
        throw new RelayCandidateRefusedError('a relay that dialed this node waits its turn')
      }
      if (inbound) this.inboundAsked.add(id)
      try {
        return await addRelay(peer, type)
      } catch (err) {
        const name = err instanceof Error ? err.name : ''
        // not failures: enough relays held already, or the queue was full
        if (name !== 'HadEnoughRelaysError' && name !== 'RelayQueueFullError') this.stats.reservationsFailed++
        throw err
      } finally {
        if (inbound) {
          this.inboundAsked.delete(id)
          this.nextInbound(store, components, logger)
        }
      }
    }
    const stop = store.stop.bind(store)
    store.stop = () => {
      for (const t of this.reasks) clearTimeout(t)
      this.reasks.clear()
      this.inboundWaiting.clear()
      this.unusable.clear()
      stop()
    }
    // registered before the transport's listeners (made when the node starts listening), so they see the bounded list
    store.addEventListener('relay:created-reservation', (evt) => { this.onReservation(evt.detail, components) })
    store.addEventListener('relay:removed', (evt) => { this.onRemoved(evt.detail.relay, store, components, logger) })
  }

  /** Asks the oldest waiting candidate that dialed the node, if it is still connected and still needed. */
  private nextInbound (store: ReservationStoreLike, components: Components, logger: Logger): void {
    for (const [id, peer] of this.inboundWaiting) {
      this.inboundWaiting.delete(id)
      if (store.hasReservation(peer) || !direct(components.connectionManager.getConnections(peer))) continue
      // counted by the guard when it fails; not needed any more is no failure
      store.addRelay(peer, 'discovered').catch((err: unknown) => { logger('a relay candidate that dialed this node was not reserved on - %e', err) })
      return
    }
  }

  private onReservation (r: Reservation, components: Components): void {
    const relay = r.relay.toString()
    const previous = this.kept.get(relay)
    const plan = this.plan(r.relay, r.details, components)
    this.stats.addrsDropped += plan.dropped
    // the address the node reached this relay on is this relay's: another relay that named it gives it up
    for (const [other, gone] of plan.yielded) {
      const kept = this.kept.get(other) ?? []
      this.kept.set(other, kept.filter(a => !gone.some(g => g.equals(a))))
      this.stats.addrsDropped += gone.length
    }
    r.details.reservation.addrs = plan.keep.map(a => a.bytes)
    const circuits = plan.keep.map(a => a.encapsulate('/p2p-circuit'))
    this.kept.set(relay, circuits)
    if (plan.via !== undefined) this.vias.set(relay, plan.via)
    if (previous === undefined) {
      this.stats.reservations++
      this.walk?.reset()
    } else {
      this.stats.renewals++
      this.forgetLater(previous.filter(p => !circuits.some(c => c.equals(p))), components)
    }
  }

  private onRemoved (relay: PeerId, store: ReservationStoreLike, components: Components, logger: Logger): void {
    this.stats.reservationsRemoved++
    const wait = this.stats.backoffMs
    // a slot lost (its relay gone, or a renewal that failed) is looked for again at once, not after the walk's wait
    this.walk?.reset()
    const previous = this.kept.get(relay.toString())
    this.kept.delete(relay.toString())
    this.vias.delete(relay.toString())
    if (previous !== undefined) this.forgetLater(previous, components)
    // libp2p never asks a relay again whose renewal failed: the walk skips peers the node is connected to
    if (this.unusable.delete(relay.toString()) || !direct(components.connectionManager.getConnections(relay), true)) return
    const timer = setTimeout(() => {
      this.reasks.delete(timer)
      if (store.hasReservation(relay) || !direct(components.connectionManager.getConnections(relay), true)) return
      this.stats.reasked++
      // counted by the guard when it fails; not needed any more is no failure
      store.addRelay(relay, 'discovered').catch((err: unknown) => { logger('asking a relay again for a lost reservation failed - %e', err) })
    }, Math.min(Math.max(wait, RELAY_DISCOVERY_BACKOFF_MIN_MS), RELAY_REASK_DELAY_MAX_MS))
    this.reasks.add(timer)
  }

  /**
   * The relay's addresses to take as this node's circuit addresses: the
   * relay's own (its peer id), the one the node reached the relay on first
   * (whatever another relay named), none that shares libp2p's key with one of
   * this node's addresses, with the address another relay was reached on, or
   * with another relay's kept one (confirming or withdrawing it would confirm
   * or withdraw that one), at most RELAY_ADDRS_PER_RESERVATION_MAX.
   */
  private plan (peer: PeerId, details: ReservationDetails, components: Components): AddressPlan {
    const relay = peer.toString()
    const own = ownKeys(components)
    const otherVias = new Set<string>()
    const otherKept = new Map<string, Array<[string, Multiaddr]>>()
    for (const [other, addrs] of this.kept) {
      if (other === relay) continue
      const v = this.vias.get(other)
      if (v !== undefined) otherVias.add(v)
      for (const a of addrs) otherKept.set(addressKey(a), [...(otherKept.get(addressKey(a)) ?? []), [other, a]])
    }
    const conn = components.connectionManager.getConnections(peer).find(c => c.id === details.connection)
    const via = conn === undefined ? undefined : addressKey(conn.remoteAddr)
    const yielded = new Map<string, Multiaddr[]>()
    let dropped = 0
    const candidates: Multiaddr[] = []
    for (const buf of details.reservation.addrs) {
      let ma: Multiaddr
      try {
        ma = multiaddr(buf)
      } catch {
        dropped++
        continue
      }
      // the address the node reached the relay on comes without the relay's id
      if (!ma.getComponents().some(c => c.name === 'p2p')) ma = ma.encapsulate(`/p2p/${relay}`)
      const p2p = ma.getComponents().filter(c => c.name === 'p2p')
      const key = addressKey(ma)
      const theirs = key !== via && (otherVias.has(key) || otherKept.has(key))
      if (p2p.length !== 1 || p2p[0]?.value !== relay || hasCircuitPart(ma) || own.has(key) || theirs) {
        dropped++
        continue
      }
      candidates.push(ma)
    }
    if (via !== undefined && candidates.some(a => addressKey(a) === via)) {
      for (const [other, a] of otherKept.get(via) ?? []) if (this.vias.get(other) !== via) yielded.set(other, [...(yielded.get(other) ?? []), a])
    }
    const ordered = [...candidates.filter(a => addressKey(a) === via), ...candidates.filter(a => addressKey(a) !== via)]
    const unique = ordered.filter((a, i) => ordered.findIndex(b => b.equals(a)) === i)
    dropped += Math.max(0, unique.length - RELAY_ADDRS_PER_RESERVATION_MAX) + (ordered.length - unique.length)
    return { keep: unique.slice(0, RELAY_ADDRS_PER_RESERVATION_MAX), dropped, yielded, via }
  }

  /**
   * Once the transport's listener withdrew them (it runs after this in the
   * same event), have the address manager forget these: it keeps a withdrawn
   * address as unconfirmed for good otherwise.
   */
  private forgetLater (addrs: Multiaddr[], components: Components): void {
    if (addrs.length === 0) return
    queueMicrotask(() => {
      const table = transportAddressesOf(components)
      if (table === undefined) return
      const keep = ownKeys(components)
      for (const kept of this.kept.values()) for (const a of kept) keep.add(addressKey(a))
      for (const a of addrs) {
        if (keep.has(addressKey(a))) continue
        table.remove(a)
        this.stats.addrsForgotten++
      }
    })
  }

  /**
   * libp2p's announceFilter: the node's direct addresses as they are (its
   * own, however many), and of the circuit addresses at most
   * RELAY_ADDRS_PER_RESERVATION_MAX per relay, none of a relay with a
   * reservation that the node did not keep for it (one it gave up to the
   * relay the address belongs to), in the order libp2p gave them.
   */
  readonly announceFilter = (addrs: Multiaddr[]): Multiaddr[] => {
    const perRelay = new Map<string, number>()
    const out = addrs.filter(a => {
      if (!hasCircuitPart(a)) return true
      const s = a.toString()
      const relayAddr = (s.split('/p2p-circuit')[0] ?? '')
      // the relay's peer id: the last /p2p before /p2p-circuit
      const relay = /\/p2p\/([^/]+)$/.exec(relayAddr)?.[1] ?? ''
      const kept = this.kept.get(relay)
      if (kept !== undefined && !kept.some(k => k.toString() === `${relayAddr}/p2p-circuit`)) return false
      const n = perRelay.get(relay) ?? 0
      if (n >= RELAY_ADDRS_PER_RESERVATION_MAX) return false
      perRelay.set(relay, n + 1)
      return true
    })
    this.stats.announceHeldBack = addrs.length - out.length
    return out
  }
}
