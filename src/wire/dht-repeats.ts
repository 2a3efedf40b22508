/**
 * Work kad-dht repeats without need, done once.
 *
 * 1. Closest peers. kad-dht answers every DHT request with the routing-table
 *    contacts closest to the key, and computes them from scratch each time: a
 *    walk of the whole table and a sorted insert per contact. Discovery asks
 *    for few keys (one per capability or tag), over and over. The result now
 *    stays until the table gains or loses a contact (the k-bucket tree's add
 *    and remove hooks, and kad-dht's `peer:add` and `peer:remove`; a bucket
 *    split moves contacts, it does not change which are closest), at most
 *    DHT_CLOSEST_CACHED keys. Each caller gets its own
 *    copy (kad-dht's query shuffles the list it gets).
 * 2. Peers named again. For each peer an answer names, kad-dht dispatches a
 *    `peer` event: a routing-table update job (an abortable queue job, which
 *    makes an AbortError on cleanup) and libp2p's peer discovery (a peer-store
 *    merge). The same few peers are named in answer after answer. A peer named
 *    with the same addresses within DHT_NAMED_AGAIN_MS is not dispatched
 *    again: its update ran a moment ago and would find what it found then (a
 *    contact already in the table, or one the table has no room for without a
 *    ping it just decided on), and its addresses are in the peer store.
 *    A peer named that this node holds no connection to (nor held one a
 *    moment ago) gets only the peer discovery (its addresses, for a later
 *    dial), not the routing-table job. The table takes a new contact only
 *    after a ping, and the ping kad-dht is given here refuses, without a dial,
 *    a peer that is neither connected nor a contact (dht-contacts.ts); a
 *    contact is found in the table and left as it is. The one thing the job
 *    did besides: for a full bucket it first pinged the bucket's oldest
 *    contacts (which may dial) and evicted those that did not answer. Hearsay
 *    no longer starts that; walks (each answer adds its responder) and new
 *    connections still do, which is the rule dht-contacts.ts already keeps
 *    (a peer enters the table once this node has talked to it). In a mesh larger than a
 *    node's connections most peers an answer names are such peers, and their
 *    jobs (a queue entry, an abort signal, a thrown error, a log line) were
 *    the part of a discover's CPU that grew with the mesh (session 35).
 *
 * 3. Tags of the closest peers. Every few seconds kad-dht's closest-peer
 *    tagger builds a set of the (at most 20) peers closest to this node
 *    and compares it with the last one, both ways. Its set keeps peer ids
 *    as strings and its comparison turns each back into a peer id (base58
 *    decoding and a public key) and that into a string again (base58
 *    encoding), whether anything changed or not: in a 500-node simulation,
 *    10 % of a group process's CPU while tasks ran. The comparison now keys
 *    the peer ids kad-dht holds by their strings, which each keeps once made;
 *    what it writes to the peer store, and when, is unchanged, except that a
 *    write the store refuses is made again on the next refresh (counted).
 *
 * 4. Addresses of named peers. A stranger's answer may name any peer with any
 *    addresses (an answer can be 4 MiB): each named peer keeps only those the
 *    node's address filter allows (address-filter.ts: no /dnsaddr names,
 *    no /unix paths, no link-local, loopback and private ones only where the
 *    node is itself),
 *    at most DHT_NAMED_ADDRS_MAX of them, both in the `peer` events that
 *    reach the peer store and in the answer the walk reads (it checks each
 *    named peer's addresses are dialable, resolving /dnsaddr names; 3000
 *    addresses of one peer were kept, and one /dnsaddr name cost some
 *    hundred thousand DNS lookups per walk; found by a review).
 *
 * Reads kad-dht members its KadDHT interface does not declare
 * (`routingTable`, `network`, the table's `closestPeerTagger`); their shape
 * is checked, and without them the DHT is left as it is (the stats say so:
 * `applied: false`, `closeTagsApplied: false`).
 */
import { KEEP_ALIVE, type PeerId } from '@libp2p/interface'
import { multiaddr, type Multiaddr } from '@multiformats/multiaddr'
import type { KadDHT, KadDHTComponents } from '@libp2p/kad-dht'
import { DHT_CLOSEST_CACHED, DHT_NAMED_AGAIN_MS, DHT_NAMED_TRACKED } from '../constants.ts'
import { bytesKey } from '../util/bytes-key.ts'
import { DHT_NAMED_ADDRS_MAX } from './network-constants.ts'
import { kadMember } from './kad-internals.ts'

/** Whether an address named for another peer may be kept (address-filter.ts). */
export type NamedAddressFilter = (ma: Multiaddr) => boolean

export interface DhtRepeatStats {
  /** Whether this kad-dht had the members both caches need. */
  applied: boolean
  closestHits: number
  closestMisses: number
  /** `peer` events not dispatched: the peer was named with the same addresses a moment ago. */
  namedAgain: number
  /** Peers named that this node held no connection to (nor lately): discovered (peer store), no routing-table job. */
  namedUnconnected: number
  /** Whether the closest-peer tagger is the one here (3. above); its refreshes, and those that changed the tags. */
  closeTagsApplied: boolean
  closeTagRefreshes: number
  closeTagChanges: number
  /** Tag writes the peer store refused: each is made again on the next refresh. */
  closeTagWriteFailures: number
  /** Addresses of named peers dropped: refused by the address filter, or past DHT_NAMED_ADDRS_MAX. */
  namedAddrsDropped: number
}

interface Table extends EventTarget {
  kb?: unknown
  closestPeers: (kadId: Uint8Array, options?: { count?: number, exclude?: PeerId[] }) => PeerId[]
}
interface Network {
  safeDispatchEvent: (type: string, init?: { detail?: unknown }) => boolean
  _writeReadMessage?: (...args: unknown[]) => Promise<unknown>
}

/** The addresses of `peer` the filter allows, at most DHT_NAMED_ADDRS_MAX. */
function keptAddrs<T> (addrs: T[], parse: (a: T) => Multiaddr | undefined, allow: NamedAddressFilter, stats: DhtRepeatStats): T[] {
  const kept: T[] = []
  for (const a of addrs) {
    if (kept.length >= DHT_NAMED_ADDRS_MAX) break
    const ma = parse(a)
    if (ma !== undefined && allow(ma)) kept.push(a)
  }
  stats.namedAddrsDropped += addrs.length - kept.length
  return kept
}

/** The peers an answer names (closer peers, providers), as kad-dht's protobuf holds them. */
interface PbPeer { id?: Uint8Array, multiaddrs?: Uint8Array[] }

function parseBytes (b: Uint8Array): Multiaddr | undefined {
  try {
    return multiaddr(b)
  } catch {
    // kad-dht's own parse of the answer refuses it the same way
    return undefined
  }
}

/** Each answer kad-dht reads keeps, per named peer, only the addresses the filter allows (4. above). */
function filterAnswers (network: Network, allow: NamedAddressFilter, stats: DhtRepeatStats): void {
  const read = network._writeReadMessage
  if (typeof read !== 'function') return
  network._writeReadMessage = async (...args: unknown[]) => {
    const message = await read.apply(network, args) as { closer?: PbPeer[], providers?: PbPeer[] } | undefined
    for (const list of [message?.closer, message?.providers]) {
      for (const p of list ?? []) {
        if (Array.isArray(p.multiaddrs)) p.multiaddrs = keptAddrs(p.multiaddrs, parseBytes, allow, stats)
      }
    }
    return message
  }
}


function partsOf (dht: object): { table: Table, network: Network } | undefined {
  const table = kadMember<Table>(dht, 'routingTable', ['closestPeers', 'addEventListener'])
  const network = kadMember<Network>(dht, 'network', ['safeDispatchEvent'])
  return table === undefined || network === undefined ? undefined : { table, network }
}

/** Call `changed` first whenever the k-bucket tree adds or removes a contact (kad-dht's events come after a peer-store write). */
function hook (kb: unknown, changed: () => void): void {
  if (typeof kb !== 'object' || kb === null) return
  for (const name of ['onAdd', 'onRemove']) {
    const original: unknown = Reflect.get(kb, name)
    Reflect.set(kb, name, (...args: unknown[]): unknown => {
      changed()
      return typeof original === 'function' ? Reflect.apply(original, kb, args) : undefined
    })
  }
}

function cacheClosest (table: Table, stats: DhtRepeatStats): void {
  const closest = table.closestPeers.bind(table)
  const cached = new Map<string, PeerId[]>()
  let kb: unknown = table.kb
  const clear = (): void => { cached.clear() }
  table.addEventListener('peer:add', clear)
  table.addEventListener('peer:remove', clear)
  table.closestPeers = (kadId, options) => {
    if (options?.exclude !== undefined && options.exclude.length > 0) return closest(kadId, options)
    // a restarted table is a new one; its own add and remove hooks drop the cache the moment a contact changes
    if (table.kb !== kb) {
      kb = table.kb
      cached.clear()
      hook(kb, clear)
    }
    const key = `${options?.count ?? ''}:${bytesKey(kadId)}`
    let peers = cached.get(key)
    if (peers === undefined) {
      stats.closestMisses++
      peers = closest(kadId, options)
      cached.set(key, peers)
      if (cached.size > DHT_CLOSEST_CACHED) cached.delete(cached.keys().next().value as string)
    } else {
      stats.closestHits++
    }
    return peers.slice()
  }
}

function dropNamedAgain (network: Network, stats: DhtRepeatStats, now: () => number, discovered: (detail: unknown) => void, connected: (peer: PeerId) => boolean, allow?: NamedAddressFilter): void {
  const dispatch = network.safeDispatchEvent.bind(network)
  const named = new Map<string, { addrs: string, at: number }>()
  network.safeDispatchEvent = (type, given) => {
    const told = given?.detail as { id?: PeerId, multiaddrs?: Multiaddr[] } | undefined
    if (type !== 'peer' || told?.id === undefined || !Array.isArray(told.multiaddrs)) return dispatch(type, given)
    // the addresses the filter allows (4. above), in a copy: kad-dht's routing-table job and the peer store get it
    const peer = allow === undefined ? { id: told.id, multiaddrs: told.multiaddrs } : { ...told, id: told.id, multiaddrs: keptAddrs(told.multiaddrs, ma => ma, allow, stats) }
    const init = allow === undefined ? given : { ...given, detail: peer }
    // keyed by the id's bytes: a peer id decoded from an answer has no string yet, and base58 was
    // about a twentieth of a lookup's CPU when this key was peer.id.toString()
    const id = bytesKey(peer.id.toMultihash().bytes)
    const addrs = peer.multiaddrs.map(String).sort().join(' ')
    const last = named.get(id)
    const t = now()
    if (last !== undefined && last.addrs === addrs && t - last.at < DHT_NAMED_AGAIN_MS) {
      stats.namedAgain++
      return true
    }
    named.delete(id)
    named.set(id, { addrs, at: t })
    if (named.size > DHT_NAMED_TRACKED) named.delete(named.keys().next().value as string)
    if (!connected(peer.id)) {
      stats.namedUnconnected++
      discovered(init?.detail)
      return true
    }
    return dispatch(type, init)
  }
}

/** kad-dht's factory, with the two caches above on the DHT it makes; `stats` counts what they saved. */
export function dhtWithoutRepeats (factory: (components: KadDHTComponents) => KadDHT, stats: DhtRepeatStats, now: () => number = Date.now, allow?: NamedAddressFilter): (components: KadDHTComponents) => KadDHT {
  return (components) => {
    const dht = factory(components)
    const parts = partsOf(dht)
    if (parts !== undefined) {
      cacheClosest(parts.table, stats)
      // what kad-dht does with a named peer besides its routing-table job: hand it to libp2p's peer discovery
      const discovered = (detail: unknown): void => { (dht as unknown as EventTarget).dispatchEvent(new CustomEvent('peer', { detail })) }
      // the ping dht-contacts.ts gives kad-dht says which peers it takes without a ping (connected, or lately)
      const judge = (components.ping as { aliveWithoutPing?: (peer: PeerId) => boolean } | undefined)?.aliveWithoutPing
      const connected = judge ?? ((peer: PeerId): boolean => components.connectionManager.getConnections(peer).some(c => c.status === 'open'))
      dropNamedAgain(parts.network, stats, now, discovered, connected, allow)
      if (allow !== undefined) filterAnswers(parts.network, allow, stats)
      stats.applied = true
    }
    const tagger = closeTaggerOf(Reflect.get(dht, 'routingTable'))
    if (tagger !== undefined) cheapCloseTags(tagger, stats)
    return dht
  }
}

export function dhtRepeatStats (): DhtRepeatStats {
  return { applied: false, closestHits: 0, closestMisses: 0, namedAgain: 0, namedUnconnected: 0, closeTagsApplied: false, closeTagRefreshes: 0, closeTagChanges: 0, closeTagWriteFailures: 0, namedAddrsDropped: 0 }
}

interface TagWrite { tags: Record<string, { value: number } | undefined> }
/** What kad-dht's ClosestPeers holds and does (routing-table/closest-peers.js). */
interface CloseTagger {
  newPeers?: { peers: Array<{ peer: { id: PeerId } }> }
  closeTagName: string
  closeTagValue: number
  components: { peerStore: { merge: (peer: PeerId, data: TagWrite) => Promise<unknown> } }
  updatePeerTags: () => Promise<void>
}

function closeTaggerOf (table: unknown): CloseTagger | undefined {
  if (typeof table !== 'object' || table === null) return undefined
  const tagger: unknown = Reflect.get(table, 'closestPeerTagger')
  if (typeof tagger !== 'object' || tagger === null) return undefined
  const components: unknown = Reflect.get(tagger, 'components')
  const store: unknown = typeof components === 'object' && components !== null ? Reflect.get(components, 'peerStore') : undefined
  if (typeof Reflect.get(tagger, 'updatePeerTags') !== 'function' || typeof Reflect.get(tagger, 'closeTagName') !== 'string' ||
    typeof Reflect.get(tagger, 'closeTagValue') !== 'number' || typeof store !== 'object' || store === null || typeof Reflect.get(store, 'merge') !== 'function') return undefined
  return tagger as CloseTagger
}

/** kad-dht's own keep-alive tag, written beside `kad-close` (dht-keepalive.ts leaves it out of the store). */
const KAD_KEEP_ALIVE_TAG = `${KEEP_ALIVE}-kad-dht`

function cheapCloseTags (tagger: CloseTagger, stats: DhtRepeatStats): void {
  let current = new Map<string, PeerId>()
  tagger.updatePeerTags = async () => {
    stats.closeTagRefreshes++
    const next = new Map<string, PeerId>()
    for (const { peer } of tagger.newPeers?.peers ?? []) next.set(peer.id.toString(), peer.id)
    const added: PeerId[] = []
    const removed: PeerId[] = []
    for (const [id, peer] of next) if (!current.has(id)) added.push(peer)
    for (const [id, peer] of current) if (!next.has(id)) removed.push(peer)
    if (added.length === 0 && removed.length === 0) return
    stats.closeTagChanges++
    // (kad-dht's own set, `closestPeers`, is read by its refresh alone, which this one replaces)
    current = next
    const { closeTagName: name, closeTagValue: value } = tagger
    const store = tagger.components.peerStore
    const results = await Promise.allSettled([
      ...added.map(async (peer) => store.merge(peer, { tags: { [name]: { value }, [KAD_KEEP_ALIVE_TAG]: { value: 1 } } })),
      ...removed.map(async (peer) => store.merge(peer, { tags: { [name]: undefined, [KAD_KEEP_ALIVE_TAG]: undefined } }))
    ])
    // a write that failed is made again on the next refresh: the peer is held as it was before this one
    results.forEach((r, i) => {
      if (r.status === 'fulfilled') return
      stats.closeTagWriteFailures++
      const peer = i < added.length ? added[i] : removed[i - added.length]
      if (peer === undefined) return
      if (i < added.length) current.delete(peer.toString())
      else current.set(peer.toString(), peer)
    })
  }
  stats.closeTagsApplied = true
}
