/**
 * What the view says of a connection (GET /v1/ui/peers): relayed or direct,
 * which way it was opened, its transport, when, and its round trip. Read
 * here, beside the host, so that nothing above `wire` reads a multiaddr
 * (docs/architecture.md); the answer names no address.
 */
import type { Connection } from '@libp2p/interface'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { Circuit } from '@multiformats/multiaddr-matcher'

/** Address parts that name a host, not the transport above it. */
const HOST_PARTS = new Set(['ip4', 'ip6', 'dns', 'dns4', 'dns6', 'dnsaddr'])

export interface ConnectionFacts {
  type: 'direct' | 'relayed'
  direction: 'inbound' | 'outbound'
  /** The first address part above the host's (tcp, ws, memory...); its caller bounds its length. */
  transport: string
  opened_at: string
  rtt_ms: number | null
}

/**
 * Whether a connection (its remote address), or an address, goes through a
 * circuit relay. The one judge of it in the node (the view, the budget, the
 * relay guard and client, reachability): libp2p's relay transport takes as
 * a circuit what @multiformats/multiaddr-matcher's Circuit matches (its
 * dial and listen filters), so a relayed connection always has such an
 * address; a WebRTC address through a relay is not one (its data goes
 * direct).
 */
export function isRelayed (of: Multiaddr | Pick<Connection, 'remoteAddr'>): boolean {
  return Circuit.matches('remoteAddr' in of ? of.remoteAddr : of)
}

/**
 * Whether an address names a circuit part at all, wherever it stands: what
 * the relay client refuses, or counts apart, in addresses others name or it
 * announces (stricter than isRelayed: any /p2p-circuit, whatever precedes or
 * follows it).
 */
export function hasCircuitPart (ma: Multiaddr): boolean {
  return ma.getComponents().some(c => c.name === 'p2p-circuit')
}

/** A connection through a circuit relay is relayed; any other is direct (a text that is no multiaddr throws InvalidMultiaddrError). */
export function connectionType (remoteAddr: Multiaddr | string): 'direct' | 'relayed' {
  return isRelayed(typeof remoteAddr === 'string' ? multiaddr(remoteAddr) : remoteAddr) ? 'relayed' : 'direct'
}

export function connectionFacts (c: Connection): ConnectionFacts {
  return {
    type: connectionType(c.remoteAddr),
    direction: c.direction,
    transport: c.remoteAddr.getComponents().find(p => !HOST_PARTS.has(p.name))?.name ?? 'unknown',
    opened_at: new Date(c.timeline.open).toISOString(),
    rtt_ms: typeof c.rtt === 'number' && c.rtt >= 0 ? c.rtt : null
  }
}
