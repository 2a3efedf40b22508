/**
 * Peers to rejoin through when no bootstrap peer answers.
 *
 * A node joins through the bootstrap peers its operator names (bootstrap.ts).
 * Restarted while those are all gone, it could not join at all, though it
 * knew many peers of the mesh before: libp2p's peer store keeps their records,
 * but reads no address older than an hour and no record older than six.
 *
 * This service remembers the last REMEMBERED_PEERS_MAX peers this node dialed
 * itself and found serving the DHT (identify names the protocol): the address
 * the dial reached first, then those the peer announced that the address
 * filter keeps (address-filter.ts: no /dnsaddr or /unix a peer names, no
 * private address outside a local mesh), each printable ASCII of at most
 * REMEMBERED_PEER_ADDR_MAX_CHARS, at most REMEMBERED_PEER_ADDRS_MAX. Only
 * peers this node dialed: those came from its bootstrap list, the DHT or a
 * caller, so a stranger cannot fill the list by connecting to the node with
 * many identities and have it rejoin through them alone (a peer a DHT answer
 * named and a walk dialed does get in: the list is a way back in, and the
 * bootstrap peers are still dialed with backoff). Peers dialed at addresses of
 * one network hold at most REMEMBERED_PEERS_PER_NETWORK_MAX places (the
 * oldest of that network leaves first), so identities on one network cannot
 * take the whole list.
 *
 * The list is written to the node's datastore (one key, under
 * REMEMBERED_PEERS_RECORD_MAX_BYTES by its bounds) once per
 * REMEMBERED_PEERS_SAVE_INTERVAL_MS when it changed, and when the node stops.
 * It is read when the node starts: every entry checked (a damaged one is
 * counted and left out, the rest kept), its addresses filtered again.
 *
 * The bootstrap loop dials them (`dial`) in a round that reached no bootstrap
 * peer while the node holds no connection at all.
 */
import { serviceCapabilities, type ComponentLogger, type Connection, type IdentifyResult, type Libp2pEvents, type Logger, type PeerId, type Startable, type TypedEventTarget } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import { Key, type Datastore } from 'interface-datastore'
import { DHT_PROTOCOL } from '../constants.ts'
import { reasonOf } from '../errors.ts'
import { addressFilterOf, DNS_PROTOCOLS, kindOfIp, withoutPeer, type AddressFilter } from './address-filter.ts'
import { networkOf } from './relay-guard.ts'
import {
  REMEMBERED_PEER_ADDR_MAX_CHARS, REMEMBERED_PEER_ADDRS_MAX, REMEMBERED_PEERS_MAX, REMEMBERED_PEERS_PER_NETWORK_MAX,
  REMEMBERED_PEERS_RECORD_MAX_BYTES, REMEMBERED_PEERS_SAVE_INTERVAL_MS
} from './network-constants.ts'

/** Where the list is kept in the node's datastore (outside libp2p's /peers/ namespace). */
export const REMEMBERED_PEERS_KEY = new Key('/aap/remembered-peers')
const FORMAT = 1
/** Addresses are kept as printable ASCII only: one byte per character, stored as written. */
const PRINTABLE = /^[\x21-\x7e]+$/

export interface RememberedPeersInit {
  /** Peers kept at most (default REMEMBERED_PEERS_MAX). */
  max?: number
  /** Of them, at most this many of one network (default REMEMBERED_PEERS_PER_NETWORK_MAX). */
  perNetwork?: number
  /** Time between two writes of a changed list (default REMEMBERED_PEERS_SAVE_INTERVAL_MS). */
  saveIntervalMs?: number
  /**
   * The host's address filter (address-filter.ts). Given here because the
   * list is loaded while libp2p starts, before the host registers it; without
   * one, the registered filter is used when there is one.
   */
  filter?: Pick<AddressFilter, 'mayKeep' | 'dialsAsKept' | 'allowRemembered'>
}

export interface RememberedPeersComponents {
  datastore: Datastore
  events: TypedEventTarget<Libp2pEvents>
  connectionManager: { openConnection: (peer: Multiaddr[], options?: { signal?: AbortSignal }) => Promise<Connection> }
  peerId: PeerId
  logger: ComponentLogger
}

export interface RememberedPeersStats {
  /** Lists written since start. */
  saved: number
  /** Writes the datastore refused, each logged; the list is written again at the next change or stop. */
  saveFailures: number
  /** A stored list that could not be read as one (then none is used), or entries of it left out as damaged. */
  loadFailures: number
  /** Rejoin rounds since start, and the remembered peers they reached. */
  dials: number
  reached: number
}

export interface RememberedPeer { id: string, addrs: string[] }

export class RememberedPeers implements Startable {
  readonly [Symbol.toStringTag] = 'aap:remembered-peers'
  readonly [serviceCapabilities]: string[] = []
  readonly stats: RememberedPeersStats = { saved: 0, saveFailures: 0, loadFailures: 0, dials: 0, reached: 0 }
  readonly max: number
  private readonly components: RememberedPeersComponents
  private readonly saveIntervalMs: number
  private readonly filter: Pick<AddressFilter, 'mayKeep' | 'dialsAsKept' | 'allowRemembered'> | undefined
  private readonly log: Logger
  /** By peer id, least recently dialed first. */
  private readonly peers = new Map<string, string[]>()
  /** The network of each peer's first address (networkOf; none for loopback or no IP), by peer id. */
  private readonly nets = new Map<string, string | undefined>()
  private readonly perNetwork: number
  private dirty = false
  private timer?: ReturnType<typeof setInterval>
  private saving?: Promise<void>

  constructor (components: RememberedPeersComponents, init: RememberedPeersInit = {}) {
    this.components = components
    this.max = init.max ?? REMEMBERED_PEERS_MAX
    this.perNetwork = init.perNetwork ?? REMEMBERED_PEERS_PER_NETWORK_MAX
    this.saveIntervalMs = init.saveIntervalMs ?? REMEMBERED_PEERS_SAVE_INTERVAL_MS
    this.filter = init.filter
    this.log = components.logger.forComponent('aap:wire:remembered-peers')
  }

  async start (): Promise<void> {
    await this.load()
    this.components.events.addEventListener('peer:identify', this.onIdentify)
    this.timer = setInterval(() => { void this.save() }, this.saveIntervalMs)
    this.timer.unref?.()
  }

  async stop (): Promise<void> {
    this.components.events.removeEventListener('peer:identify', this.onIdentify)
    clearInterval(this.timer)
    this.timer = undefined
    await this.save()
  }

  /** How many peers are remembered now. */
  get size (): number { return this.peers.size }

  /** The remembered peers, most recently dialed first. */
  list (): RememberedPeer[] {
    return [...this.peers].reverse().map(([id, addrs]) => ({ id, addrs: [...addrs] }))
  }

  /**
   * Dial every remembered peer at once; resolves to how many answered. Meanwhile the loopback address each was
   * dialed at before (its first) is dialed for it as an operator's address is (AddressFilter.allowRemembered): a
   * --bootstrap address of a local mesh, given to a node that listens on every interface, is one such a node dials
   * only when told to.
   */
  async dial (signal: AbortSignal): Promise<number> {
    const peers = this.list()
    if (peers.length === 0) return 0
    this.stats.dials++
    const filter = this.filter ?? addressFilterOf(this.components.peerId)
    filter?.allowRemembered(peers.flatMap(p => p.addrs.slice(0, 1).map(addr => ({ id: p.id, addr }))))
    let results: Array<PromiseSettledResult<Connection>>
    try {
      results = await Promise.allSettled(peers.map(async p => this.components.connectionManager.openConnection(p.addrs.map(a => withPeer(a, p.id)), { signal })))
    } finally {
      filter?.allowRemembered([])
    }
    const reached = results.filter(r => r.status === 'fulfilled').length
    this.stats.reached += reached
    const failed = results.flatMap((r, i) => r.status === 'rejected' ? [`${peers[i]?.id ?? ''}: ${reasonOf(r.reason)}`] : [])
    if (failed.length > 0 && !signal.aborted) this.log('remembered peers that did not answer: %s', failed.join('; '))
    return reached
  }

  /** Write the list when it changed (one write at a time); a refused write is counted and logged. */
  async save (): Promise<void> {
    while (this.saving !== undefined) await this.saving
    if (!this.dirty) return
    this.dirty = false
    const body = this.encoded()
    this.saving = (async () => {
      try {
        await this.components.datastore.put(REMEMBERED_PEERS_KEY, body)
        this.stats.saved++
      } catch (err) {
        this.dirty = true
        this.stats.saveFailures++
        this.log.error('could not write the remembered peers: %s', reasonOf(err))
      }
    })().finally(() => { this.saving = undefined })
    await this.saving
  }

  /** The list as stored (its bounds keep it under REMEMBERED_PEERS_RECORD_MAX_BYTES: network-constants.ts). */
  private encoded (): Uint8Array {
    return new TextEncoder().encode(JSON.stringify({ v: FORMAT, peers: [...this.peers].map(([id, addrs]) => ({ id, addrs })) }))
  }

  /**
   * The addresses worth keeping for `peer`: printable ASCII within REMEMBERED_PEER_ADDR_MAX_CHARS, that the address
   * filter keeps; at most REMEMBERED_PEER_ADDRS_MAX. `announced`: from the peer's word, kept only when this node
   * would dial them (a wildcard listener keeps strangers' loopback addresses without dialing them, and they took
   * places of addresses that work); the address it was dialed at stays first, as the filter let it through then.
   */
  private keptAddrs (peer: PeerId, addrs: Multiaddr[], announced: Multiaddr[] = []): string[] {
    const filter = this.filter ?? addressFilterOf(this.components.peerId)
    const kept: string[] = []
    for (const ma of [...addrs, ...announced]) {
      const text = withoutPeer(ma.toString(), peer.toString())
      if (text.length > REMEMBERED_PEER_ADDR_MAX_CHARS || !PRINTABLE.test(text) || kept.includes(text)) continue
      if (filter !== undefined && !filter.mayKeep(peer, ma)) continue
      if (filter !== undefined && !addrs.includes(ma) && !filter.dialsAsKept(ma)) continue
      kept.push(text)
      if (kept.length >= REMEMBERED_PEER_ADDRS_MAX) break
    }
    return kept
  }

  private readonly onIdentify = (evt: CustomEvent<IdentifyResult>): void => {
    const { peerId, protocols, listenAddrs, connection } = evt.detail
    // dialed by this node, directly, and serving the DHT (a good place to start walks from)
    if (connection.direction !== 'outbound' || connection.limits !== undefined || !protocols.includes(DHT_PROTOCOL)) return
    if (peerId.equals(this.components.peerId)) return
    const id = peerId.toString()
    // the address this node reached it at first (it dialed it), then those it announced
    const addrs = this.keptAddrs(peerId, [connection.remoteAddr], listenAddrs)
    if (addrs.length === 0) return
    this.remember(id, addrs)
  }

  private remember (id: string, addrs: string[]): void {
    this.place(id, addrs)
    this.dirty = true
  }

  /** Put `id` last (the most recent), within the per-network share and the bound. */
  private place (id: string, addrs: string[]): void {
    this.forget(id)
    const net = rememberedNetwork(addrs[0])
    if (net !== undefined) {
      // the network's oldest leaves first once it holds its share
      const same = [...this.nets].filter(([, n]) => n === net)
      for (const [other] of same.slice(0, Math.max(0, same.length - this.perNetwork + 1))) this.forget(other)
    }
    this.peers.set(id, addrs)
    this.nets.set(id, net)
    while (this.peers.size > this.max) {
      const oldest = this.peers.keys().next()
      if (oldest.done === true) break
      this.forget(oldest.value)
    }
  }

  private forget (id: string): void {
    this.peers.delete(id)
    this.nets.delete(id)
  }

  private async load (): Promise<void> {
    let bytes: Uint8Array
    try {
      bytes = await this.components.datastore.get(REMEMBERED_PEERS_KEY)
    } catch (err) {
      if (err instanceof Error && err.name === 'NotFoundError') return
      this.stats.loadFailures++
      this.log.error('could not read the remembered peers: %s', reasonOf(err))
      return
    }
    const stored = bytes.byteLength > REMEMBERED_PEERS_RECORD_MAX_BYTES ? undefined : parsed(bytes)
    if (stored === undefined) {
      this.stats.loadFailures++
      this.log.error('the stored remembered peers are not a list this node wrote (%d bytes): none is used', bytes.byteLength)
      return
    }
    this.peers.clear()
    this.nets.clear()
    for (const entry of stored.slice(-this.max)) {
      const peer = checked(entry)
      if (peer === undefined) {
        this.stats.loadFailures++
        this.log.error('a damaged remembered peer was left out')
        continue
      }
      const id = peerIdFromString(peer.id)
      if (id.equals(this.components.peerId)) continue
      // checked() parsed each address already
      // the first is the address it was dialed at; the rest it announced (a list written before those were judged
      // as dialable has strangers' loopback addresses a wildcard listener does not dial)
      const [first, ...rest] = peer.addrs.map(a => multiaddr(a))
      const addrs = this.keptAddrs(id, first === undefined ? [] : [first], rest)
      if (addrs.length > 0) {
        // a list written before the per-network share was kept is held to it too
        this.place(peer.id, addrs)
      }
    }
  }
}

/** The stored entries, or undefined when the bytes are not a list of this format. */
function parsed (bytes: Uint8Array): unknown[] | undefined {
  try {
    const value: unknown = JSON.parse(new TextDecoder().decode(bytes))
    if (typeof value !== 'object' || value === null || Reflect.get(value, 'v') !== FORMAT) return undefined
    const peers: unknown = Reflect.get(value, 'peers')
    return Array.isArray(peers) ? peers : undefined
  } catch {
    // not JSON: the caller counts and logs it
    return undefined
  }
}

/** An entry that names a peer id and at least one address, each of which parses; undefined otherwise. */
function checked (entry: unknown): RememberedPeer | undefined {
  if (typeof entry !== 'object' || entry === null) return undefined
  const id: unknown = Reflect.get(entry, 'id')
  const addrs: unknown = Reflect.get(entry, 'addrs')
  if (typeof id !== 'string' || !Array.isArray(addrs) || addrs.length === 0 || addrs.length > REMEMBERED_PEER_ADDRS_MAX) return undefined
  try {
    peerIdFromString(id)
    for (const a of addrs) {
      if (typeof a !== 'string' || a.length > REMEMBERED_PEER_ADDR_MAX_CHARS) return undefined
      multiaddr(a)
    }
  } catch {
    // an id or address that does not parse: the caller counts and logs the entry
    return undefined
  }
  return { id, addrs: addrs.filter((a): a is string => typeof a === 'string') }
}

/**
 * The network (relay-guard.ts networkOf) of a remembered address: undefined for loopback, which a local mesh
 * shares, and for an address with no host (an in-process /memory one); one network for every DNS name, since
 * names cost nothing and may all point at one machine.
 */
function rememberedNetwork (addr: string | undefined): string | undefined {
  if (addr === undefined) return undefined
  let ma: Multiaddr
  try {
    ma = multiaddr(addr)
  } catch {
    // kept addresses parse (keptAddrs, checked): nothing to group
    return undefined
  }
  const parts = ma.getComponents()
  if (parts.some(c => DNS_PROTOCOLS.has(c.name))) return 'dns names'
  const ip = parts.find(c => c.name === 'ip4' || c.name === 'ip6')?.value
  return ip === undefined || kindOfIp(ip) === 'loopback' ? undefined : networkOf(ma)
}

function withPeer (addr: string, id: string): Multiaddr {
  return multiaddr(`${addr}/p2p/${id}`)
}

/** The libp2p service: `services: { rememberedPeers: rememberedPeers() }`. */
export function rememberedPeers (init: RememberedPeersInit = {}): (components: RememberedPeersComponents) => RememberedPeers {
  return (components) => new RememberedPeers(components, init)
}
