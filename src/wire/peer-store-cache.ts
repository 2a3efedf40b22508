/**
 * A read cache in front of libp2p's peer store.
 *
 * Every peer-store read (`get`, `getInfo`, `has`) takes a per-peer lock,
 * reads the datastore and decodes a protobuf. kad-dht makes many of them: an
 * answer to a DHT request looks up each of the k peers it names, and each
 * peer named in an answer is merged back into the asker's store with the same
 * addresses it already holds (libp2p's peer discovery). In a 100-node mesh
 * these reads and no-change merges were a quarter of the CPU a discover cost.
 *
 * This cache keeps the last peer each read or write returned, per peer id,
 * for PEER_STORE_CACHE_TTL_MS, at most PEER_STORE_CACHE_MAX peers.
 * - A read answers from the cache while the entry is fresh.
 * - Every write (`save`, `patch`, `merge`, `delete`, `consumePeerRecord`)
 *   drops the peer's entry before it starts, and a read that began before a
 *   write ended is not cached, so a read never returns what a write replaced.
 * - A `merge` of addresses and protocols alone, every one of which the fresh
 *   entry already holds, is answered from the cache without a write (libp2p
 *   merges the protocol of every stream it opens or accepts, before the
 *   stream is handed over). What it skips is the refresh of those addresses'
 *   last-seen time, which then lags by at most the TTL (libp2p keeps an
 *   address for an hour).
 * Readers get a copy of the cached peer, so no caller can change another's,
 * without the tags that expired since it was cached.
 */
import type { Peer, PeerData, PeerId, PeerStore, Tag } from '@libp2p/interface'
import { PEER_STORE_CACHE_MAX, PEER_STORE_CACHE_TTL_MS } from '../constants.ts'

/** What the cache saved, per host: reads answered, reads that went to the store, merges skipped. */
export interface PeerStoreCacheStats {
  hits: number
  misses: number
  mergesSkipped: number
}

interface Entry { peer: Peer, at: number }

/** A copy of `peer` without the tags that expired by `at` (the store drops those when it reads). */
function copyPeer (peer: Peer, at: number): Peer {
  const tags = new Map<string, Tag>()
  for (const [name, tag] of peer.tags) {
    const expiry = (tag as { expiry?: bigint | number }).expiry
    if (expiry === undefined || expiry === null || Number(expiry) >= at) tags.set(name, tag)
  }
  return { ...peer, addresses: peer.addresses.slice(), protocols: peer.protocols.slice(), metadata: new Map(peer.metadata), tags }
}

/** True when `data` only adds addresses and protocols, and `peer` already holds each of them. */
function mergeChangesNothing (peer: Peer, data: PeerData): boolean {
  for (const key of Object.keys(data)) {
    if (key !== 'multiaddrs' && key !== 'protocols') return false
  }
  if (data.protocols !== undefined && !data.protocols.every(p => peer.protocols.includes(p))) return false
  if (data.multiaddrs === undefined || data.multiaddrs.length === 0) return true
  const held = new Set(peer.addresses.map(a => a.multiaddr.toString()))
  return data.multiaddrs.every(ma => held.has(ma.toString()))
}

/** One fewer of `id` in `counts`; true when none is left. */
function countDown (counts: Map<string, number>, id: string): boolean {
  const left = (counts.get(id) ?? 1) - 1
  if (left > 0) counts.set(id, left)
  else counts.delete(id)
  return left <= 0
}

/**
 * Put the cache in front of `store`, in place: libp2p's services hold this
 * very object. Returns the cache's counters.
 */
export function cachePeerStore (store: PeerStore, now: () => number = Date.now): PeerStoreCacheStats {
  const stats: PeerStoreCacheStats = { hits: 0, misses: 0, mergesSkipped: 0 }
  const entries = new Map<string, Entry>()
  // reads of the store running, per peer; a write meanwhile marks the peer so none of them caches what it read
  const reading = new Map<string, number>()
  const overwritten = new Set<string>()
  // writes running, per peer: only the last to end caches what it stored
  const writing = new Map<string, number>()

  const fresh = (id: string): Entry | undefined => {
    const e = entries.get(id)
    if (e === undefined) return undefined
    if (now() - e.at >= PEER_STORE_CACHE_TTL_MS) {
      entries.delete(id)
      return undefined
    }
    return e
  }
  const remember = (id: string, peer: Peer): void => {
    entries.delete(id)
    entries.set(id, { peer, at: now() })
    // the oldest insertion goes first
    if (entries.size > PEER_STORE_CACHE_MAX) entries.delete(entries.keys().next().value as string)
  }

  // the store's own methods call these through `this` (getInfo, consumePeerRecord), so they see the cache too
  const get = store.get.bind(store)
  store.get = async (peerId, options) => {
    const id = peerId.toString()
    const e = fresh(id)
    if (e !== undefined) {
      stats.hits++
      return copyPeer(e.peer, now())
    }
    stats.misses++
    reading.set(id, (reading.get(id) ?? 0) + 1)
    try {
      const peer = await get(peerId, options)
      if (!overwritten.has(id) && !writing.has(id)) remember(id, copyPeer(peer, now()))
      return peer
    } finally {
      if (countDown(reading, id)) overwritten.delete(id)
    }
  }
  const has = store.has.bind(store)
  store.has = async (peerId, options) => {
    if (fresh(peerId.toString()) !== undefined) {
      stats.hits++
      return true
    }
    return has(peerId, options)
  }

  // a write drops the entry, spoils the reads running meanwhile, and caches what it stored
  const write = async <T>(peerId: PeerId, run: () => Promise<T>, stored: (result: T) => Peer | undefined): Promise<T> => {
    const id = peerId.toString()
    entries.delete(id)
    if (reading.has(id)) overwritten.add(id)
    writing.set(id, (writing.get(id) ?? 0) + 1)
    let result: T | undefined
    try {
      result = await run()
      return result
    } finally {
      if (countDown(writing, id)) {
        const peer = result === undefined ? undefined : stored(result)
        if (peer !== undefined) remember(id, copyPeer(peer, now()))
      }
    }
  }
  const save = store.save.bind(store)
  store.save = async (peerId, data, options) => write(peerId, async () => save(peerId, data, options), p => p)
  const patch = store.patch.bind(store)
  store.patch = async (peerId, data, options) => write(peerId, async () => patch(peerId, data, options), p => p)
  const merge = store.merge.bind(store)
  store.merge = async (peerId, data, options) => {
    const e = fresh(peerId.toString())
    if (e !== undefined && mergeChangesNothing(e.peer, data)) {
      stats.mergesSkipped++
      return copyPeer(e.peer, now())
    }
    return write(peerId, async () => merge(peerId, data, options), p => p)
  }
  const del = store.delete.bind(store)
  store.delete = async (peerId, options) => write(peerId, async () => del(peerId, options), () => undefined)
  return stats
}
