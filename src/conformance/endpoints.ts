/**
 * What counts as transport endpoint data in a Run or an event the target
 * gave (AAP-CARD-ENDPOINT-HIDDEN): a multiaddr (a /p2p/ address too), a URL,
 * an IPv4 or IPv6 literal with or without a port, a host name (dotted, or
 * localhost) with a port, a socket scheme (`unix:`, `tcp:`, `udp:` and the
 * like), one of the target's own listen hosts, or a member whose name says
 * endpoint, addr or url. An agent id alone, or a run id (`<agent id>:<hex>`),
 * is a name, not an endpoint.
 * capabilityTransportIn adds what names a capability's transport (C1-NO-TRANSPORT).
 */
import { isIPv4, isIPv6 } from 'node:net'
import { KIT_SCAN_MAX_DEPTH } from './constants.ts'
import { clean } from './kit.ts'

/** A multiaddr component that names a transport, a host or a peer address. */
const MULTIADDR = /\/(?:ip4|ip6|ip6zone|dns|dns4|dns6|dnsaddr|tcp|udp|quic|quic-v1|memory|p2p-circuit|ws|wss|tls|webtransport|webrtc|webrtc-direct|unix|p2p|ipfs)\/[^\s/"]/i
const URL_SCHEME = /\b[a-z][a-z0-9+.-]*:\/\//i
/** Dotted quads not inside a longer number or word, with an optional port. */
const IPV4 = /(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3})(?::\d{1,5})?(?![\w.])/g
/** Runs of hex digits, colons and dots (an IPv6 literal, maybe bracketed with a port) not inside a word. */
const IPV6 = /(?<![\w:.])\[?([0-9a-f]*:[0-9a-f:.]*(?:%[\w.]+)?)\]?(?::\d{1,5})?(?![\w:.])/gi
const MEMBER = /endpoint|addr|url/i
/**
 * `localhost` or a dotted host name (its last label starts with a letter)
 * with a port of 1 to 5 digits, not inside a longer word, name or number:
 * `localhost:4001`, `node-7.mesh.example.com:4001`. An agent id has no dot
 * and a run id's hex is no port, so neither matches.
 */
const HOST_PORT = /(?<![\w.-])(localhost|(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z][a-z0-9-]*):(\d{1,5})(?![\w.:])/i
/** A socket scheme followed by what it reaches (`unix:/var/run/x.sock`, `tcp:host:4001`), starting the string or after a non-scheme character. */
const SOCKET_SCHEME = /(?:^|[^A-Za-z0-9+.-])((?:unix|tcp|udp|tls|quic|sctp)(?:\+[a-z0-9.-]+)*):(?=\S)/i

/** The hosts of the target's listen addresses (ip4, ip6, dns components), never its agent id. */
export function hostsOf (addrs: readonly string[]): string[] {
  const out = new Set<string>()
  for (const a of addrs) {
    const parts = a.split('/')
    for (let i = 1; i + 1 < parts.length; i++) {
      if (/^(ip4|ip6|dns|dns4|dns6|dnsaddr)$/.test(parts[i] ?? '') && (parts[i + 1] ?? '') !== '') out.add(parts[i + 1] ?? '')
    }
  }
  return [...out]
}

/** Why `text` holds endpoint data, or undefined. */
function inText (text: string, hosts: readonly string[]): string | undefined {
  const m = MULTIADDR.exec(text)
  if (m !== null) return `a multiaddr (${clean(text.slice(m.index, m.index + 80), 80)})`
  const u = URL_SCHEME.exec(text)
  if (u !== null) return `a URL (${clean(text.slice(u.index, u.index + 80), 80)})`
  const sock = SOCKET_SCHEME.exec(text)
  if (sock !== null) return `a socket address (${clean(text.slice(sock.index, sock.index + 80), 80)})`
  for (const v4 of text.matchAll(IPV4)) if (isIPv4(v4[1] ?? '')) return `an IPv4 address (${v4[0]})`
  for (const v6 of text.matchAll(IPV6)) {
    const literal = (v6[1] ?? '').replace(/%.*$/, '')
    if (literal.includes(':') && isIPv6(literal)) return `an IPv6 address (${clean(v6[0], 80)})`
  }
  const hp = HOST_PORT.exec(text)
  if (hp !== null) return `a host and port (${clean(hp[0], 80)})`
  const host = hosts.find(h => text.includes(h))
  if (host !== undefined) return `the target's listen host ${clean(host, 80)}`
  return undefined
}

/**
 * Every place in `value` (a parsed JSON value) that holds endpoint data, as
 * `<path>: <why>`; `targetAddrs` are the target's own multiaddrs. A value
 * nested too deep to scan counts as found: the check cannot show it clean.
 */
export function endpointsIn (value: unknown, targetAddrs: readonly string[] = []): string[] {
  const hosts = hostsOf(targetAddrs)
  const found: string[] = []
  const walk = (v: unknown, path: string, depth = 0): void => {
    if (depth > KIT_SCAN_MAX_DEPTH) {
      found.push(`${path}: nested deeper than ${KIT_SCAN_MAX_DEPTH} levels, not scanned`)
    } else if (typeof v === 'string') {
      const why = inText(v, hosts)
      if (why !== undefined) found.push(`${path}: ${why}`)
    } else if (Array.isArray(v)) {
      v.forEach((x, i) => { walk(x, `${path}[${i}]`, depth + 1) })
    } else if (typeof v === 'object' && v !== null) {
      for (const [k, x] of Object.entries(v)) {
        const at = `${path}.${clean(k, 80)}`
        if (MEMBER.test(k)) found.push(`${at}: an endpoint member`)
        walk(x, at, depth + 1)
      }
    }
  }
  walk(value, '$')
  return found
}

/**
 * How a capability is reached, named above the transport (C1-NO-TRANSPORT):
 * a scheme of one of the capability transports the contract lists (MCP over
 * stdio or SSE, a local function, a Skills runtime) or of a socket they run
 * over, followed by a non-space, e.g. `stdio:/usr/bin/tool`, `mcp+sse:…`,
 * `skills:pdf`, `local:handler`. The scheme must start the string or follow
 * a character that cannot be part of a scheme, so `cap:aap-conformance`, an
 * agent id (base58) and a run id (`<agent id>:<hex>`) never match, nor does
 * prose such as `local: x`. Web schemes (http, ws, file) are left out here:
 * an agent's output may name a web page it read; in a capability ref they
 * count (WEB_SCHEME), and a URL anywhere is endpoint data (endpointsIn).
 */
const TRANSPORT_SCHEME = /(?:^|[^A-Za-z0-9+.-])((?:mcp|sse|stdio|unix|skills?|local|fn|function|lambda)(?:\+[a-z0-9.-]+)*):(?=\S)/i
const WEB_SCHEME = /(?:^|[^A-Za-z0-9+.-])((?:https?|wss?|file)(?:\+[a-z0-9.-]+)*):(?=\S)/i
/** A member whose name says how a capability is reached (`transport`, `stdio`, `sse`, `mcp…`, `command`, `skills_runtime`). */
const TRANSPORT_MEMBER = /transport|stdio|(?:^|_)sse(?:$|_)|mcp|(?:^|_)command(?:$|_)|skills?_?runtime/i

/**
 * Every place in `value` (a Run, an event) that tells how a capability is
 * reached: a capability transport scheme or a transport member. With `ref`
 * (a CapabilityRef or a list of them), also a web scheme and any endpoint
 * data (endpointsIn): a reference is a name and nothing else. Agent ids, run
 * ids and CapabilityRefs are names, not transports: they never match.
 * Endpoint data elsewhere in a Run or an event is AAP-CARD-ENDPOINT-HIDDEN's
 * (no-endpoint-upward), not counted here twice.
 */
export function capabilityTransportIn (value: unknown, targetAddrs: readonly string[] = [], ref = false): string[] {
  const found = ref ? endpointsIn(value, targetAddrs) : []
  const walk = (v: unknown, path: string, depth = 0): void => {
    if (depth > KIT_SCAN_MAX_DEPTH) {
      found.push(`${path}: nested deeper than ${KIT_SCAN_MAX_DEPTH} levels, not scanned`)
    } else if (typeof v === 'string') {
      const m = TRANSPORT_SCHEME.exec(v) ?? (ref ? WEB_SCHEME.exec(v) : null)
      if (m !== null) found.push(`${path}: a capability transport (${clean(v.slice(m.index, m.index + 80), 80)})`)
    } else if (Array.isArray(v)) {
      v.forEach((x, i) => { walk(x, `${path}[${i}]`, depth + 1) })
    } else if (typeof v === 'object' && v !== null) {
      for (const [k, x] of Object.entries(v)) {
        const at = `${path}.${clean(k, 80)}`
        if (TRANSPORT_MEMBER.test(k)) found.push(`${at}: a capability transport member`)
        walk(x, at, depth + 1)
      }
    }
  }
  walk(value, '$')
  return [...new Set(found)]
}
