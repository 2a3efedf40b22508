/**
 * Which addresses of other peers this node keeps and dials. Peers name
 * addresses for themselves (identify) and for others (DHT answers, gossip
 * peer exchange); a stranger can name any address for a peer id it made up,
 * and the node would dial it: a service on this machine, on its LAN, or the
 * cloud metadata address. The policy (README.md, "Joining a mesh across
 * networks"):
 *
 * - link-local (169.254.0.0/16, fe80::/10) and unspecified (0.0.0.0, ::)
 *   addresses: never kept, never dialed;
 * - loopback (127.0.0.0/8, ::1): dialed only when this node listens on an
 *   explicit loopback address itself (127.0.0.1, ::1: local tests and
 *   simulations), or runs a local mesh: its peers there are processes on the
 *   same machine. A wildcard listener (0.0.0.0, ::, the CLI's default)
 *   serves the network: a stranger naming 127.0.0.1:<any port> for itself
 *   (identify, a peer record) or for another had it dial any service on its
 *   own machine (found by a review). Such a node still keeps them in the peer
 *   store, undialed: libp2p announces only a loopback address until AutoNAT
 *   has verified a public one, and kad-dht leaves a connected peer with no
 *   kept address out of its routing table (its onPeerConnect) until they
 *   connect again: two public nodes on 0.0.0.0 then could not tell each other
 *   of their cards (test/net/bootstrap.test.ts, when refused). A kept
 *   loopback address that is dialed fails at once, at the gater.
 *   (test/net/no-relay.test.ts depended on a
 *   NATed agent's loopback address being dialed: a discover's card fetch
 *   failed fast there and read the DHT record in time. card-fetch.ts now
 *   reads the record beside a call that hangs, after
 *   CARD_DHT_FALLBACK_AFTER_MS.);
 * - private ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7): only
 *   when this node has an address in one itself (listens on it, announces it,
 *   or listens on a wildcard with an interface in one): it is then on a LAN
 *   with its peers, and a mesh there needs those addresses;
 * - /dnsaddr names: not kept from peers. libp2p follows every TXT entry of
 *   a /dnsaddr name to depth 32 before it gates a single address, so one such
 *   name from a stranger cost some hundred thousand lookups per DHT walk
 *   (found by a review). A /dns, /dns4 or /dns6 name is one lookup, and what
 *   it resolves to is judged like every other IP before a dial: kept (a node behind a
 *   TLS proxy announces a name for WSS, and so may a relay);
 * - /unix socket paths: never kept from peers (a socket on this machine,
 *   whatever it serves; @libp2p/tcp dials them).
 *
 * Addresses the operator configured (bootstrap addresses, --announce) are
 * always allowed, DNS names among them: `allowConfigured` records them.
 * Other addresses (public IPs, /memory, a bare /p2p) are allowed. Every
 * host an address names is judged, and all must pass: its IPs and DNS names
 * (for a relay address, the relay's), and a /tls/sni value, which
 * @libp2p/websockets dials in place of the IP before it
 * (/ip4/203.0.113.9/tcp/4001/tls/sni/127.0.0.1/ws dialed wss://127.0.0.1:4001,
 * found by a review); an sni name that is no IP is judged as a /dns one. An
 * IPv6 address that stands for an IPv4 one is judged as that IPv4 address:
 * IPv4-mapped (::ffff:a.b.c.d) and NAT64 (64:ff9b::/96, and the local-use
 * 64:ff9b:1::/48 in its /96 form), since a NAT64 gateway on this node's
 * network forwards 64:ff9b::7f00:1 to 127.0.0.1 and 64:ff9b::a00:1 to
 * 10.0.0.1. A 64:ff9b:1::/48 address in another form counts as private: its
 * IPv4 part sits where the local network's prefix length puts it, which this
 * node cannot know, and the prefix is a local network's by definition
 * (RFC 8215).
 *
 * Count: addresses named in DHT answers are counted per answer
 * (dht-repeats.ts, DHT_NAMED_ADDRS_MAX). Those a peer sends of itself
 * (identify, bounded by its message size; an ADD_PROVIDER record) are not:
 * a cap here, where a write's source is unknown, would also count the
 * addresses others named for that peer before, so a stranger that named 32
 * made-up ones would lock the peer's real ones out of the store for an hour
 * (found by a review, when such a cap was tried).
 */
import { lookup } from 'node:dns/promises'
import { BlockList, isIP } from 'node:net'
import { networkInterfaces } from 'node:os'
import type { PeerId } from '@libp2p/interface'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { makeRoom } from '../util/bounded.ts'
import { ADDRESS_NAME_LOOKUP_TIMEOUT_MS, ADDRESS_NAME_LOOKUPS_MAX, ADDRESS_NAME_VERDICT_TTL_MS, ADDRESS_NAME_VERDICTS_MAX } from './network-constants.ts'

function blockList (v4: string[], v6: string[]): BlockList {
  const list = new BlockList()
  for (const s of v4) { const [net, bits] = s.split('/'); list.addSubnet(net ?? '', Number(bits), 'ipv4') }
  for (const s of v6) { const [net, bits] = s.split('/'); list.addSubnet(net ?? '', Number(bits), 'ipv6') }
  return list
}

const LINK_LOCAL = blockList(['169.254.0.0/16', '0.0.0.0/32'], ['fe80::/10', '::/128'])
const LOOPBACK = blockList(['127.0.0.0/8'], ['::1/128'])
const PRIVATE = blockList(['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '100.64.0.0/10'], ['fc00::/7'])

export type AddressKind = 'link-local' | 'loopback' | 'private' | 'public'

/** The IPv4 address an IPv4-mapped IPv6 one stands for (::ffff:a.b.c.d, or its hex form ::ffff:0a01:0203). */
export function mappedV4 (ip: string): string | undefined {
  const dotted = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip)?.[1]
  if (dotted !== undefined) return dotted
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(ip)
  if (hex === null) return undefined
  const n = (Number.parseInt(hex[1] ?? '0', 16) << 16 | Number.parseInt(hex[2] ?? '0', 16)) >>> 0
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.')
}

const NAT64_WELL_KNOWN = blockList([], ['64:ff9b::/96'])
const NAT64_LOCAL_USE = blockList([], ['64:ff9b:1::/48'])

/** The eight 16-bit groups of an IPv6 address (a dotted IPv4 tail and a zone allowed), or undefined. */
function ipv6Groups (ip: string): number[] | undefined {
  let text = ip.split('%')[0] ?? ''
  const tail = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text)
  if (tail !== null) {
    const [a, b, c, d] = tail.slice(1).map(Number) as [number, number, number, number]
    text = `${text.slice(0, tail.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const halves = text.split('::')
  if (halves.length > 2) return undefined
  const part = (h: string | undefined): number[] => h === undefined || h === '' ? [] : h.split(':').map(g => Number.parseInt(g, 16))
  const head = part(halves[0])
  const rest = part(halves[1])
  const groups = halves.length === 2 ? [...head, ...new Array<number>(8 - head.length - rest.length).fill(0), ...rest] : head
  return groups.length === 8 && groups.every(g => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? groups : undefined
}

/**
 * The IPv4 address a NAT64 one stands for (its last 32 bits: 64:ff9b::/96,
 * or 64:ff9b:1::/48 in the /96 form), '' for a 64:ff9b:1::/48 address in
 * another form (where its IPv4 part sits is the local network's choice), or
 * undefined for any other address.
 */
export function nat64V4 (ip: string): string | undefined {
  if (isIP(ip) !== 6) return undefined
  const wellKnown = NAT64_WELL_KNOWN.check(ip, 'ipv6')
  if (!wellKnown && !NAT64_LOCAL_USE.check(ip, 'ipv6')) return undefined
  const g = ipv6Groups(ip)
  if (g === undefined) return undefined
  if (!wellKnown && (g[3] !== 0 || g[4] !== 0 || g[5] !== 0)) return ''
  const hi = g[6] ?? 0
  const lo = g[7] ?? 0
  return [hi >>> 8, hi & 255, lo >>> 8, lo & 255].join('.')
}

/** The kind of an IP address (an IPv4-mapped or NAT64 IPv6 address is judged as its IPv4 one: see above). */
export function kindOfIp (ip: string): AddressKind {
  const nat64 = nat64V4(ip)
  if (nat64 === '') return 'private'
  const addr = mappedV4(ip) ?? nat64 ?? ip
  const type = isIP(addr) === 6 ? 'ipv6' : 'ipv4'
  if (LINK_LOCAL.check(addr, type)) return 'link-local'
  if (LOOPBACK.check(addr, type)) return 'loopback'
  if (PRIVATE.check(addr, type)) return 'private'
  return 'public'
}

/** The multiaddr protocols that carry a DNS name (remembered-peers.ts groups them as one network). */
export const DNS_PROTOCOLS: ReadonlySet<string> = new Set(['dns', 'dns4', 'dns6', 'dnsaddr'])
/** Names kept from no peer: each TXT entry is followed (see above). */
const REFUSED_FROM_PEERS = new Set(['dnsaddr', 'unix'])

interface Host { proto: string, host: string, port: string }

/** The host component at `i` with its port: the one after it, or for a /tls/sni name the TCP port before it (the one a WebSocket dials). */
function hostAt (parts: ReturnType<Multiaddr['getComponents']>, i: number): Host | undefined {
  const c = parts[i]
  if (c === undefined) return undefined
  const next = parts[i + 1]
  const prev = c.name === 'sni' ? parts.slice(0, i).reverse().find(p => p.name === 'tcp' || p.name === 'udp') : undefined
  const port = prev?.value ?? (next?.name === 'tcp' || next?.name === 'udp' ? next.value ?? '' : '')
  return { proto: c.name, host: (c.value ?? '').toLowerCase(), port }
}

const HOST_PROTOCOLS = new Set(['ip4', 'ip6', 'unix', 'sni', ...DNS_PROTOCOLS])

/** The first IP or DNS component of an address, with the port after it (undefined: neither, e.g. /memory). */
function hostOf (ma: Multiaddr): Host | undefined {
  const parts = ma.getComponents()
  return hostAt(parts, parts.findIndex(c => c.name !== 'sni' && HOST_PROTOCOLS.has(c.name)))
}

/**
 * Every component of an address that names a host a transport may connect
 * to: its IPs and DNS names, and a /tls/sni name, which @libp2p/websockets
 * dials instead of the IP before it (multiaddr-to-uri builds wss://<sni>).
 */
function hostsOf (ma: Multiaddr): Host[] {
  const parts = ma.getComponents()
  const out: Host[] = []
  parts.forEach((c, i) => {
    const h = HOST_PROTOCOLS.has(c.name) ? hostAt(parts, i) : undefined
    if (h !== undefined) out.push(h)
  })
  return out
}

export interface SelfAddresses {
  /** Multiaddrs the node listens on and announces. */
  listen: string[]
  /** A local mesh (many nodes on one machine): loopback peers allowed. */
  localMesh: boolean
}

export class AddressFilter {
  /** Loopback addresses of other peers are dialed (and kept). */
  readonly loopbackOk: boolean
  /** Loopback addresses of other peers are kept, not necessarily dialed (a wildcard listener: see above). */
  readonly loopbackKept: boolean
  readonly privateOk: boolean
  private readonly self: string
  /** host/port of addresses the operator configured ('' port: any). */
  private readonly configured = new Set<string>()
  /** Names the gater may dial, or not, by their last lookup (mayDialNow), until the time given; the oldest go first. */
  private readonly nameVerdicts = new Map<string, { ok: boolean, until: number }>()
  /** Names being looked up for the gater. */
  private readonly nameLookups = new Set<string>()
  /** Names the gater refused without a lookup, ADDRESS_NAME_LOOKUPS_MAX being under way. */
  namesNotLookedUp = 0
  /** `<peer id> <address>` of the loopback addresses remembered peers were dialed at (allowRemembered), while they are dialed again. */
  private rememberedDials = new Set<string>()
  /** Addresses refused (kept and dialed), for operators and tests. */
  refused = 0
  /** Names of peers' addresses that could not be looked up before a dial (refused), and the last reason. */
  lookupFailures = 0
  lastLookupFailure: unknown
  constructor (selfId: PeerId | string, own: SelfAddresses) {
    this.self = selfId.toString()
    const ips: string[] = []
    let loopback = own.localMesh
    let wildcard = false
    for (const a of own.listen) {
      const ma = safeMultiaddr(a)
      const h = ma === undefined ? undefined : hostOf(ma)
      if (h === undefined || DNS_PROTOCOLS.has(h.proto)) continue
      if (h.host === '0.0.0.0' || h.host === '::') {
        // a wildcard stands for the host's interfaces: a private one puts the node on a LAN. Its loopback
        // interface does not make strangers' loopback addresses dialable (see above)
        wildcard = true
        for (const list of Object.values(networkInterfaces())) for (const i of list ?? []) ips.push(i.address)
        continue
      }
      if (kindOfIp(h.host) === 'loopback') loopback = true
      ips.push(h.host)
    }
    this.loopbackOk = loopback
    this.loopbackKept = loopback || wildcard
    this.privateOk = ips.some(ip => kindOfIp(ip) === 'private')
  }

  /** Addresses the operator gave (bootstrap, announce): always allowed, DNS names too. */
  allowConfigured (addrs: Array<string | Multiaddr>): void {
    for (const a of addrs) {
      const ma = typeof a === 'string' ? safeMultiaddr(a) : a
      for (const h of ma === undefined ? [] : hostsOf(ma)) this.configured.add(`${h.host}/${h.port}`)
    }
  }

  /**
   * While the remembered peers are dialed again (remembered-peers.ts), the loopback address each was dialed at
   * before is dialed for that peer as an operator's address is: a --bootstrap address of a local mesh, given to a
   * node that listens on every interface, which such a node dials only when told to. An IP literal alone (a name is
   * looked up as always, and an sni name too), that address exactly (its transport too) for that peer id only, for
   * dialing only (mayKeep is not changed); `[]` ends it. At most REMEMBERED_PEERS_MAX entries at a time.
   */
  allowRemembered (entries: Array<{ id: string, addr: string }>): void {
    const next = new Set<string>()
    for (const { id, addr } of entries) {
      const ma = safeMultiaddr(addr)
      const hosts = ma === undefined ? [] : hostsOf(ma)
      const h = hosts[0]
      if (hosts.length !== 1 || h === undefined || (h.proto !== 'ip4' && h.proto !== 'ip6') || kindOfIp(h.host) !== 'loopback') continue
      next.add(`${id} ${ma?.toString() ?? ''}`)
    }
    this.rememberedDials = next
  }

  private isConfigured (h: { host: string, port: string }): boolean {
    return this.configured.has(`${h.host}/${h.port}`)
  }

  /**
   * Whether the node may dial `ma`, a name's lookup awaited (the gater asks mayDialNow, which never waits). libp2p
   * resolves /dnsaddr before it asks; a /dns, /dns4 or /dns6 name reaches the
   * transport as a name, which would connect wherever it points (localhost,
   * the metadata address): it is looked up here once, within
   * ADDRESS_NAME_LOOKUP_TIMEOUT_MS, and dialed only when every address it
   * has passes as an IP would. (The transport looks it up again: a name that
   * changes its answer in between is not caught.)
   */
  mayDial (ma: Multiaddr): boolean | Promise<boolean> {
    const lookups: Array<Promise<boolean>> = []
    const ok = this.judgeDial(ma, (name, family) => {
      lookups.push(this.nameOk(name, family))
      return true
    })
    return !ok || lookups.length === 0 ? ok : Promise.all(lookups).then(all => all.every(Boolean))
  }

  /**
   * The gater's verdict (denyDialMultiaddr), never waiting: as mayDial, but a name is dialed only once a lookup has
   * said where it points (ADDRESS_NAME_VERDICT_TTL_MS); the first dial of a name starts its lookup and is refused.
   * kad-dht asks whether each closer peer of a walk is dialable, one after another: a gater that awaited lookups let a
   * stranger hold a walk for ADDRESS_NAME_LOOKUP_TIMEOUT_MS per name it named.
   */
  mayDialNow (ma: Multiaddr): boolean {
    return this.judgeDial(ma, (name, family) => this.nameVerdict(name, family))
  }

  /** The dial rule of mayDial and mayDialNow: each host of `ma` passes, a DNS name by `nameOk`'s word (false: refused). */
  private judgeDial (ma: Multiaddr, nameOk: (name: string, family: 0 | 4 | 6) => boolean): boolean {
    if (this.rememberedDials.size > 0 && this.rememberedDials.has(rememberedKey(ma))) return true
    for (const h of hostsOf(ma)) {
      if (this.isConfigured(h)) continue
      if (h.proto === 'unix' || h.proto === 'dnsaddr') return this.refuse()
      if (isName(h)) {
        if (!nameOk(h.host, h.proto === 'dns4' ? 4 : h.proto === 'dns6' ? 6 : 0)) return false
      } else if (!this.ipOk(h.host, true)) return false
    }
    return true
  }

  /** Names being looked up for the gater now. */
  get pendingNameLookups (): number { return this.nameLookups.size }

  private nameVerdict (name: string, family: 0 | 4 | 6): boolean {
    const key = `${family} ${name}`
    const known = this.nameVerdicts.get(key)
    if (known !== undefined && known.until > Date.now()) return known.ok
    if (this.nameLookups.has(key)) return false
    if (this.nameLookups.size >= ADDRESS_NAME_LOOKUPS_MAX) {
      this.namesNotLookedUp++
      return false
    }
    this.nameLookups.add(key)
    // nameOk never rejects: a failed lookup is counted there and answers false
    void this.nameOk(name, family).then((ok) => {
      this.nameVerdicts.delete(key)
      makeRoom(this.nameVerdicts, ADDRESS_NAME_VERDICTS_MAX)
      this.nameVerdicts.set(key, { ok, until: Date.now() + ADDRESS_NAME_VERDICT_TTL_MS })
      this.nameLookups.delete(key)
    })
    return false
  }

  private async nameOk (name: string, family: 0 | 4 | 6): Promise<boolean> {
    const timer = AbortSignal.timeout(ADDRESS_NAME_LOOKUP_TIMEOUT_MS)
    try {
      const found = await Promise.race([
        lookup(name, { all: true, family }),
        new Promise<never>((_resolve, reject) => { timer.addEventListener('abort', () => { reject(timer.reason) }, { once: true }) })
      ])
      return found.length > 0 && found.every(a => this.ipOk(a.address, true))
    } catch (err) {
      this.lookupFailures++
      this.lastLookupFailure = err
      return this.refuse()
    }
  }

  /** Whether `ma`, named by a peer for `peer` (undefined: another peer than this node), may be kept (peer store, DHT answers). */
  mayKeep (peer: PeerId | undefined, ma: Multiaddr): boolean {
    if (peer !== undefined && peer.toString() === this.self) return true
    for (const h of hostsOf(ma)) {
      if (this.isConfigured(h)) continue
      if (REFUSED_FROM_PEERS.has(h.proto)) return this.refuse()
      if (!isName(h) && !this.ipOk(h.host, false)) return false
    }
    return true
  }

  /**
   * Whether `ma`, kept for another peer, is one this node would dial as it is: a wildcard listener keeps strangers'
   * loopback addresses (see above) but dials only those the operator gave. Counts nothing (mayKeep has judged it).
   */
  dialsAsKept (ma: Multiaddr): boolean {
    return this.loopbackOk || hostsOf(ma).every(h => this.isConfigured(h) || isName(h) || kindOfIp(h.host) !== 'loopback')
  }

  private refuse (): false {
    this.refused++
    return false
  }

  private ipOk (ip: string, dial: boolean): boolean {
    const kind = kindOfIp(ip)
    const ok = kind === 'public' || (kind === 'loopback' && (dial ? this.loopbackOk : this.loopbackKept)) || (kind === 'private' && this.privateOk)
    if (!ok) this.refused++
    return ok
  }
}

/** `<peer id> <address without its /p2p/<peer id>>` of a dialed address (AddressFilter.allowRemembered). */
function rememberedKey (ma: Multiaddr): string {
  const peer = ma.getComponents().findLast(c => c.name === 'p2p')?.value ?? ''
  return `${peer} ${withoutPeer(ma.toString(), peer)}`
}

/** `addr` without a trailing `/p2p/<id>` (remembered-peers.ts keeps addresses so). */
export function withoutPeer (addr: string, id: string): string {
  const suffix = `/p2p/${id}`
  return addr.endsWith(suffix) ? addr.slice(0, -suffix.length) : addr
}

/** A DNS name to look up before a dial: a /dns, /dns4, /dns6 component, or a /tls/sni value that is no IP. */
function isName (h: Host): boolean {
  return DNS_PROTOCOLS.has(h.proto) || (h.proto === 'sni' && isIP(h.host) === 0)
}

function safeMultiaddr (a: string): Multiaddr | undefined {
  try {
    return multiaddr(a)
  } catch {
    // not an address: nothing to judge (the caller's own parse reports it)
    return undefined
  }
}

/** The filter of each host, by its peer id, so the bootstrap loop can record what the operator configured. */
const filters = new WeakMap<PeerId, AddressFilter>()

export function registerFilter (peer: PeerId, filter: AddressFilter): void {
  filters.set(peer, filter)
}

/** Record operator-configured addresses on the filter of the host with this peer id (none: a host made elsewhere). */
export function allowConfigured (peer: PeerId, addrs: Array<string | Multiaddr>): void {
  filters.get(peer)?.allowConfigured(addrs)
}

export function addressFilterOf (peer: PeerId): AddressFilter | undefined {
  return filters.get(peer)
}
