/**
 * What the view says of a connection (GET /v1/ui/peers): relayed or direct,
 * which way it was opened, its transport, when, and its round trip. Read
 * here, beside the host, so that nothing above `wire` reads a multiaddr
 * (docs/architecture.md); the answer names no address.
 */
import type { Connection } from '@libp2p/interface'

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

/** A connection through a circuit relay is relayed; any other is direct. */
export function connectionType (remoteAddr: string): 'direct' | 'relayed' {
  return remoteAddr.includes('/p2p-circuit') ? 'relayed' : 'direct'
}

export function connectionFacts (c: Connection): ConnectionFacts {
  return {
    type: connectionType(c.remoteAddr.toString()),
    direction: c.direction,
    transport: c.remoteAddr.getComponents().find(p => !HOST_PARTS.has(p.name))?.name ?? 'unknown',
    opened_at: new Date(c.timeline.open).toISOString(),
    rtt_ms: typeof c.rtt === 'number' && c.rtt >= 0 ? c.rtt : null
  }
}
