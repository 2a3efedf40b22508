/**
 * Who holds this relay's reservations. libp2p keeps a reservation for its
 * whole TTL (RELAY_RESERVATION_TTL_MS, an hour) after its holder left, and
 * takes one from anyone while slots are free: 64 throwaway peer ids, each
 * reserving and leaving, locked honest private nodes out for an hour (found
 * by a review). Here:
 *
 * - a reservation is dropped when its holder's last direct connection to this
 *   relay closes (a relayed connection to it cannot carry anything without
 *   the holder's own connection: the relay stops it through that one);
 * - the holders of one network (/24 IPv4, /48 IPv6) hold at most
 *   RELAY_RESERVATIONS_PER_NETWORK_MAX reservations at once (the connection
 *   gater's denyInboundRelayReservation). A local mesh does not apply it to
 *   loopback holders: its nodes all share 127.0.0.1, and a loopback holder is
 *   a process on this machine anyway.
 */
import { isIP } from 'node:net'
import type { Connection, PeerId } from '@libp2p/interface'
import type { Multiaddr } from '@multiformats/multiaddr'
import { kindOfIp, mappedV4 } from './address-filter.ts'
import { isRelayed } from './connection-facts.ts'
import type { CircuitRelayService } from '@libp2p/circuit-relay-v2'
import { relayServiceOf } from './network.ts'
import { RELAY_RESERVATIONS_PER_NETWORK_MAX } from './network-constants.ts'

interface RelayHost {
  services: Record<string, unknown>
  getConnections: (peer?: PeerId) => Connection[]
  addEventListener: (type: 'connection:close', fn: (evt: CustomEvent<Connection>) => void) => void
  removeEventListener: (type: 'connection:close', fn: (evt: CustomEvent<Connection>) => void) => void
}

export interface RelayGuardStats {
  /** Reservations dropped because their holder left. */
  dropped: number
  /** Reservations refused because the holder's network held RELAY_RESERVATIONS_PER_NETWORK_MAX. */
  refusedPerNetwork: number
}

/** The network of an IP address: its /24 (IPv4) or /48 (IPv6); undefined for no IP. */
export function networkOf (ma: Multiaddr): string | undefined {
  const c = ma.getComponents().find(c => c.name === 'ip4' || c.name === 'ip6')
  const ip = c?.value
  if (ip === undefined) return undefined
  const v4 = mappedV4(ip) ?? (isIP(ip) === 4 ? ip : undefined)
  if (v4 !== undefined) return v4.split('.').slice(0, 3).join('.') + '.0/24'
  // the first three groups of the full form
  const [head = '', tail = ''] = ip.toLowerCase().split('::')
  const h = head === '' ? [] : head.split(':')
  const t = tail === '' ? [] : tail.split(':')
  const groups = ip.includes('::') ? [...h, ...Array<string>(Math.max(8 - h.length - t.length, 0)).fill('0'), ...t] : h
  return groups.slice(0, 3).map(g => Number.parseInt(g === '' ? '0' : g, 16).toString(16)).join(':') + '::/48'
}

export class RelayGuard {
  readonly stats: RelayGuardStats = { dropped: 0, refusedPerNetwork: 0 }
  private host?: RelayHost
  private readonly localMesh: boolean

  constructor (localMesh: boolean) {
    this.localMesh = localMesh
  }

  private reservations (): CircuitRelayService['reservations'] | undefined {
    return this.host === undefined ? undefined : relayServiceOf(this.host)?.reservations
  }

  /** Once the host exists: drop the reservation of a holder whose last direct connection closed. */
  start (host: RelayHost): void {
    this.host = host
    host.addEventListener('connection:close', this.onClose)
  }

  stop (): void {
    this.host?.removeEventListener('connection:close', this.onClose)
  }

  private readonly onClose = (evt: CustomEvent<Connection>): void => {
    const peer = evt.detail.remotePeer
    const store = this.reservations()
    const held = store?.get(peer)
    if (store === undefined || held === undefined) return
    if (this.host?.getConnections(peer).some(c => c !== evt.detail && c.status === 'open' && !isRelayed(c)) === true) return
    // its timer would otherwise delete the holder's next reservation when this one's TTL ends
    held.signal.clear()
    store.delete(peer)
    this.stats.dropped++
  }

  /** The gater's denyInboundRelayReservation: whether the network of `peer`'s connection holds its share already. */
  deny (peer: PeerId): boolean {
    const store = this.reservations()
    if (store === undefined || store.has(peer)) return false
    const conn = this.host?.getConnections(peer).find(c => c.status === 'open' && !isRelayed(c))
    const ip = conn?.remoteAddr.getComponents().find(c => c.name === 'ip4' || c.name === 'ip6')?.value
    const net = conn === undefined ? undefined : networkOf(conn.remoteAddr)
    if (ip === undefined || net === undefined) return false
    if (this.localMesh && kindOfIp(ip) === 'loopback') return false
    let held = 0
    for (const r of store.values()) if (networkOf(r.addr) === net) held++
    if (held < RELAY_RESERVATIONS_PER_NETWORK_MAX) return false
    this.stats.refusedPerNetwork++
    return true
  }
}
