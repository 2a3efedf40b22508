/**
 * Reachability across networks, built from libp2p's own modules:
 *
 * - AutoNAT v2 asks peers to dial this node back on a fresh connection, which
 *   verifies its public addresses; libp2p announces only verified ones.
 *   (AutoNAT v1, @libp2p/autonat 3.0.28, is not used: its server's dial-back
 *   reuses the connection the request came on, sees the wrong port, fails
 *   and closes that connection, so it never verifies and keeps dropping peers.)
 * - Circuit Relay v2: every node can dial /p2p-circuit addresses; a node that
 *   is publicly reachable serves bounded reservations (network-constants.ts);
 *   a private node listens on /p2p-circuit, i.e. reserves slots on relays it
 *   finds among its peers, and libp2p publishes the relay addresses.
 * - DCUtR tries to turn a relayed connection into a direct one.
 * - UPnP asks the LAN's gateway for a port mapping (opt-in).
 *
 * Relayed connections carry limits (time, bytes), and libp2p opens streams on
 * them only for protocols that say they may run there: `limitedConnectionsHost`
 * is the host the mesh's protocols use, so two private agents can talk over a
 * relay. Nothing above this layer sees which kind of connection it got.
 */
import { autoNATv2 } from '@libp2p/autonat-v2'
import { circuitRelayServer, type circuitRelayTransport, type CircuitRelayService } from '@libp2p/circuit-relay-v2'
import { dcutr } from '@libp2p/dcutr'
import { uPnPNAT } from '@libp2p/upnp-nat'
import { isPrivateIp } from '@libp2p/utils'
import { networkInterfaces } from 'node:os'
import { isPeerId, type Connection, type Libp2p } from '@libp2p/interface'
import type { ServiceFactoryMap } from 'libp2p'
import {
  AUTONAT_REFRESH_INTERVAL_MS, AUTONAT_STARTUP_DELAY_MS, AUTONAT_TIMEOUT_MS, DCUTR_RETRIES, DCUTR_TIMEOUT_MS,
  RELAY_CLIENT_RESERVATIONS, RELAY_CONNECTION_MAX_BYTES, RELAY_CONNECTION_MAX_DURATION_MS, RELAY_HOP_TIMEOUT_MS,
  RELAY_MAX_INBOUND_HOP_STREAMS, RELAY_MAX_RESERVATIONS, RELAY_MAX_STOP_STREAMS, RELAY_RESERVATION_CONCURRENCY,
  RELAY_RESERVATION_TIMEOUT_MS, RELAY_RESERVATION_TTL_MS
} from './network-constants.ts'
import type { RelayClient } from './relay-client.ts'

/** Serve relay reservations: `auto` once AutoNAT confirms a public address, `on` always, `off` never. */
export type RelayServerMode = 'auto' | 'on' | 'off'
export const RELAY_SERVER_MODES: readonly RelayServerMode[] = ['auto', 'on', 'off']

export interface NetworkOptions {
  relayServer: RelayServerMode
  /** Reserve slots on relays (RELAY_CLIENT_RESERVATIONS of them) and publish the relay addresses. */
  relayClient: boolean
  /** Ask the LAN gateway for a port mapping with UPnP. */
  upnp: boolean
}

/** The service name of the relay server in `host.services`. */
export const RELAY_SERVICE = 'relay'

/**
 * The relay server of a host, when it serves relay slots: its service under
 * RELAY_SERVICE, checked to be one (a host made without it has none there).
 */
export function relayServiceOf (host: { services: Record<string, unknown> }): CircuitRelayService | undefined {
  const svc: unknown = host.services[RELAY_SERVICE]
  if (typeof svc !== 'object' || svc === null || !('reservations' in svc)) return undefined
  const { reservations } = svc
  return typeof reservations === 'object' && reservations !== null && 'delete' in reservations ? svc as CircuitRelayService : undefined
}

export function relayListenAddrs (opts: NetworkOptions): string[] {
  return opts.relayClient ? Array.from({ length: RELAY_CLIENT_RESERVATIONS }, () => '/p2p-circuit') : []
}

/** The relay transport, its discovery, reservations and addresses bounded by `client` (relay-client.ts). */
export function networkTransports (client: RelayClient): Array<ReturnType<typeof circuitRelayTransport>> {
  return [client.transport({
    reservationCompletionTimeout: RELAY_RESERVATION_TIMEOUT_MS,
    reservationConcurrency: RELAY_RESERVATION_CONCURRENCY,
    maxInboundStopStreams: RELAY_MAX_STOP_STREAMS,
    maxOutboundStopStreams: RELAY_MAX_STOP_STREAMS
  })]
}

export function networkServices (opts: NetworkOptions): ServiceFactoryMap<Record<string, unknown>> {
  const services: ServiceFactoryMap<Record<string, unknown>> = {
    autoNAT: autoNATv2({ startupDelay: AUTONAT_STARTUP_DELAY_MS, refreshInterval: AUTONAT_REFRESH_INTERVAL_MS, timeout: AUTONAT_TIMEOUT_MS }),
    dcutr: dcutr({ timeout: DCUTR_TIMEOUT_MS, retries: DCUTR_RETRIES })
  }
  if (opts.relayServer !== 'off') {
    services[RELAY_SERVICE] = circuitRelayServer({
      hopTimeout: RELAY_HOP_TIMEOUT_MS,
      maxInboundHopStreams: RELAY_MAX_INBOUND_HOP_STREAMS,
      maxOutboundStopStreams: RELAY_MAX_STOP_STREAMS,
      reservations: {
        maxReservations: RELAY_MAX_RESERVATIONS,
        reservationTtl: RELAY_RESERVATION_TTL_MS,
        applyDefaultLimit: true,
        defaultDurationLimit: RELAY_CONNECTION_MAX_DURATION_MS,
        defaultDataLimit: BigInt(RELAY_CONNECTION_MAX_BYTES)
      }
    })
  }
  if (opts.upnp) services.upnp = uPnPNAT()
  return services
}

const LIMITED_OK = { runOnLimitedConnection: true }

/**
 * The connection a stream to a peer should go on: open, unlimited before
 * relayed, and the oldest first. AutoNAT v2 dials a peer back on a fresh
 * connection and closes it right after; a stream that picked that one would
 * die with it.
 */
export function settledConnection (conns: Connection[]): Connection | undefined {
  return conns.filter(c => c.status === 'open')
    .sort((a, b) => Number(a.limits !== undefined) - Number(b.limits !== undefined) || a.timeline.open - b.timeline.open)[0]
}

/**
 * The host as the mesh's protocols see it: the protocols they register and
 * the streams they open may use relayed (limited) connections, and a stream
 * to a connected peer goes on its settled connection (above). Every other
 * member is the host's own, bound to it.
 */
export function limitedConnectionsHost<T extends Libp2p> (host: T): T {
  return new Proxy(host, {
    get (target, prop) {
      if (prop === 'handle') {
        return async (protocol: string | string[], handler: Parameters<T['handle']>[1], options?: Record<string, unknown>) =>
          target.handle(protocol, handler, { ...options, ...LIMITED_OK })
      }
      if (prop === 'dialProtocol') {
        return async (peer: Parameters<T['dialProtocol']>[0], protocols: string | string[], options?: Record<string, unknown>) => {
          const conn = isPeerId(peer) ? settledConnection(target.getConnections(peer)) : undefined
          // `force` asks for a new connection (dial.ts: the settled one was closing)
          if (conn !== undefined && options?.force !== true) return conn.newStream(protocols, { ...options, ...LIMITED_OK })
          return target.dialProtocol(peer, protocols, { ...options, ...LIMITED_OK })
        }
      }
      const value: unknown = Reflect.get(target, prop, target)
      return typeof value === 'function' ? value.bind(target) : value
    }
  })
}

/**
 * Whether a node should reserve relay slots when asked to decide itself: it
 * has an address other nodes could route to (not only loopback), none of its
 * addresses is public and the operator announced none. Wildcard listen
 * addresses stand for the host's interfaces.
 */
export function needsRelay (listen: string[], announce: string[] = []): boolean {
  if (announce.length > 0) return false
  const ips: string[] = []
  for (const a of listen) {
    const m = /^\/ip([46])\/([^/]+)\/(tcp|udp)\//.exec(a)
    const host = m?.[2]
    if (m === null || host === undefined) continue
    if (host === '0.0.0.0' || host === '::') {
      for (const list of Object.values(networkInterfaces())) {
        for (const i of list ?? []) if ((i.family === 'IPv4') === (m[1] === '4')) ips.push(i.address)
      }
    } else {
      ips.push(host)
    }
  }
  const routable = ips.filter(ip => !ip.startsWith('127.') && ip !== '::1' && !ip.toLowerCase().startsWith('fe80:'))
  return routable.length > 0 && routable.every(ip => isPrivateIp(ip) === true)
}
