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
 *
 * Reads kad-dht members its KadDHT interface does not declare
 * (`routingTable`, `network`); their shape is checked, and without them the
 * DHT is left as it is (the stats say so: `applied: false`).
 */
import type { PeerId } from '@libp2p/interface'
import type { KadDHT, KadDHTComponents } from '@libp2p/kad-dht'
import { DHT_CLOSEST_CACHED, DHT_NAMED_AGAIN_MS, DHT_NAMED_TRACKED } from '../constants.ts'

export interface DhtRepeatStats {
  /** Whether this kad-dht had the members both caches need. */
  applied: boolean
  closestHits: number
  closestMisses: number
  /** `peer` events not dispatched: the peer was named with the same addresses a moment ago. */
  namedAgain: number
}

interface Table extends EventTarget {
  kb?: unknown
  closestPeers: (kadId: Uint8Array, options?: { count?: number, exclude?: PeerId[] }) => PeerId[]
}
interface Network {
  safeDispatchEvent: (type: string, init?: { detail?: unknown }) => boolean
}

function partsOf (dht: object): { table: Table, network: Network } | undefined {
  const table: unknown = Reflect.get(dht, 'routingTable')
  const network: unknown = Reflect.get(dht, 'network')
  if (typeof table !== 'object' || table === null || typeof Reflect.get(table, 'closestPeers') !== 'function' || typeof Reflect.get(table, 'addEventListener') !== 'function') return undefined
  if (typeof network !== 'object' || network === null || typeof Reflect.get(network, 'safeDispatchEvent') !== 'function') return undefined
  return { table: table as Table, network: network as Network }
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
    const key = `${options?.count ?? ''}:${Buffer.from(kadId.buffer, kadId.byteOffset, kadId.byteLength).toString('base64')}`
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

function dropNamedAgain (network: Network, stats: DhtRepeatStats, now: () => number): void {
  const dispatch = network.safeDispatchEvent.bind(network)
  const named = new Map<string, { addrs: string, at: number }>()
  network.safeDispatchEvent = (type, init) => {
    const peer = init?.detail as { id?: PeerId, multiaddrs?: Array<{ toString: () => string }> } | undefined
    if (type !== 'peer' || peer?.id === undefined || !Array.isArray(peer.multiaddrs)) return dispatch(type, init)
    const id = peer.id.toString()
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
    return dispatch(type, init)
  }
}

/** kad-dht's factory, with the two caches above on the DHT it makes; `stats` counts what they saved. */
export function dhtWithoutRepeats (factory: (components: KadDHTComponents) => KadDHT, stats: DhtRepeatStats, now: () => number = Date.now): (components: KadDHTComponents) => KadDHT {
  return (components) => {
    const dht = factory(components)
    const parts = partsOf(dht)
    if (parts !== undefined) {
      cacheClosest(parts.table, stats)
      dropNamedAgain(parts.network, stats, now)
      stats.applied = true
    }
    return dht
  }
}

export function dhtRepeatStats (): DhtRepeatStats {
  return { applied: false, closestHits: 0, closestMisses: 0, namedAgain: 0 }
}
