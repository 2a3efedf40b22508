/**
 * The peer store's records in memory while the disk refuses them.
 *
 * libp2p's peer store keeps what the node knows of peers (its own protocols
 * and addresses among them) under `/peers/` in the node's datastore, and
 * libp2p writes it while it starts: the registrar records each protocol the
 * node serves. A node restarted on a full disk therefore could not start, and
 * could not answer for the runs it had acknowledged, although reading them
 * needs no write. What the peer store holds is network knowledge that the
 * node learns again from its peers, not something it promised anyone, so a
 * peer-store write the store refuses (STORAGE_FULL, write-guard.ts) is kept
 * here instead, at most PEER_STORE_MEMORY_MAX records, and read from here
 * before the disk (get, has, and queries that can reach `/peers/`), until a
 * later write of the same record reaches the disk. Every other key, and every
 * other kind of failure, is the datastore's as before (libp2p's peer store
 * reads with get and query alone).
 */
import { NotFoundError } from '@libp2p/interface'
import { Key as DsKey, type Datastore, type Key, type KeyQuery, type Pair, type Query } from 'interface-datastore'
import type { Logger } from '../logger.ts'
import { refusedAsClosed, refusedByStore } from '../storage/write-guard.ts'
import { PEER_STORE_MEMORY_MAX } from './network-constants.ts'

/** The datastore's own option types, passed through unchanged. */
type PutOptions = Parameters<Datastore['put']>[2]
type DeleteOptions = Parameters<Datastore['delete']>[1]
type GetOptions = Parameters<Datastore['get']>[1]
type QueryOptions = Parameters<Datastore['query']>[1]
type QueryKeysOptions = Parameters<Datastore['queryKeys']>[1]

/** Where libp2p's peer store keeps its records (@libp2p/peer-store NAMESPACE_COMMON). */
const PEERS_PREFIX = '/peers/'

export interface PeerStoreMemoryStats {
  /** Records (or deletions) held in memory now. */
  held: number
  /** Peer-store writes the disk refused and memory took, since start. */
  kept: number
  /** Refused writes memory could not take either (it was full): the peer store heard the refusal. */
  overflow: number
  /** Peer-store writes libp2p made after the node closed its store (while it stopped): dropped, they describe peers it leaves. */
  afterClose: number
}

/** A view of `ds` with the peer store's refused writes kept in memory (see above), and what it held. */
export function keepPeerRecordsInMemory (ds: Datastore, log: Logger, max = PEER_STORE_MEMORY_MAX): { store: Datastore, stats: PeerStoreMemoryStats } {
  /** Key text -> the record, or null where a delete was refused. */
  const memory = new Map<string, Uint8Array | null>()
  const stats: PeerStoreMemoryStats = { held: 0, kept: 0, overflow: 0, afterClose: 0 }
  const isPeer = (k: Key): boolean => k.toString().startsWith(PEERS_PREFIX)
  const keep = (k: Key, v: Uint8Array | null, err: unknown): void => {
    const key = k.toString()
    if (!memory.has(key) && memory.size >= max) {
      stats.overflow++
      throw err
    }
    if (memory.size === 0) log.warn({ err }, 'the disk refused a peer-store write: peer records are kept in memory until it takes them again')
    memory.set(key, v)
    stats.kept++
    stats.held = memory.size
  }
  /** Whether a failed write of `k` was dropped because the store had closed (the node is stopping). */
  const droppedAfterClose = (k: Key, err: unknown): boolean => {
    if (!refusedAsClosed(err)) return false
    stats.afterClose++
    log.debug({ key: k.toString() }, 'a peer-store write came after the datastore closed: dropped')
    return true
  }
  const reached = (k: Key): void => {
    memory.delete(k.toString())
    stats.held = memory.size
  }
  const own: Record<PropertyKey, unknown> = {
    put: async (k: Key, v: Uint8Array, o?: PutOptions): Promise<Key> => {
      if (!isPeer(k)) return ds.put(k, v, o)
      try {
        await ds.put(k, v, o)
      } catch (err) {
        if (droppedAfterClose(k, err)) return k
        if (!refusedByStore(err)) throw err
        keep(k, v, err)
        return k
      }
      reached(k)
      return k
    },
    delete: async (k: Key, o?: DeleteOptions): Promise<void> => {
      if (!isPeer(k)) { await ds.delete(k, o); return }
      try {
        await ds.delete(k, o)
      } catch (err) {
        if (droppedAfterClose(k, err)) return
        if (!refusedByStore(err)) throw err
        keep(k, null, err)
        return
      }
      reached(k)
    },
    get: async (k: Key, o?: GetOptions): Promise<Uint8Array> => {
      const held = memory.get(k.toString())
      if (held === null) throw new NotFoundError(`no record at ${k.toString()}`)
      return held ?? ds.get(k, o)
    },
    has: async (k: Key, o?: GetOptions): Promise<boolean> => {
      const held = memory.get(k.toString())
      return held === undefined ? ds.has(k, o) : held !== null
    },
    // only a query that can reach /peers/ is merged: every other one (kad-dht's records and providers) is the
    // datastore's own, with its limit and order applied there
    query: (q: Query, o?: QueryOptions) => memory.size === 0 || !reachesPeers(q.prefix) ? ds.query(q, o) : merged(ds, memory, q, o),
    queryKeys: (q: KeyQuery, o?: QueryKeysOptions) => memory.size === 0 || !reachesPeers(q.prefix) ? ds.queryKeys(q, o) : mergedKeys(ds, memory, q, o)
  }
  const store = new Proxy(ds, {
    get (target, prop) {
      if (Object.hasOwn(own, prop)) return own[prop]
      const v: unknown = Reflect.get(target, prop, target)
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
    }
  })
  return { store, stats }
}

/** Whether a query of `prefix` can return peer-store keys. */
function reachesPeers (prefix: string | undefined): boolean {
  const p = prefix ?? ''
  return p.startsWith(PEERS_PREFIX) || PEERS_PREFIX.startsWith(p)
}

/**
 * The query over the disk's records and the ones in memory, memory first:
 * filters, orders, offset and limit are applied to the merged records (which
 * are then read whole, as only a refused peer-store write makes this path).
 */
async function * merged (ds: Datastore, memory: Map<string, Uint8Array | null>, q: Query, o: QueryOptions): AsyncGenerator<Pair> {
  const prefix = q.prefix ?? ''
  const filters = q.filters ?? []
  const pass = (p: Pair): boolean => filters.every(f => f(p))
  const out: Pair[] = []
  for await (const p of ds.query({ ...(q.prefix === undefined ? {} : { prefix: q.prefix }), filters }, o)) {
    if (!memory.has(p.key.toString())) out.push(p)
  }
  for (const [key, value] of memory) {
    if (value === null || !key.startsWith(prefix)) continue
    const p = { key: new DsKey(key), value }
    if (pass(p)) out.push(p)
  }
  // as datastore-core applies them: one after the other (a stable sort each)
  for (const order of q.orders ?? []) out.sort(order)
  const from = q.offset ?? 0
  yield * out.slice(from, q.limit === undefined ? undefined : from + q.limit)
}

/** As `merged`, for keys alone. */
async function * mergedKeys (ds: Datastore, memory: Map<string, Uint8Array | null>, q: KeyQuery, o: QueryKeysOptions): AsyncGenerator<Key> {
  const prefix = q.prefix ?? ''
  const filters = q.filters ?? []
  const out: Key[] = []
  for await (const k of ds.queryKeys({ ...(q.prefix === undefined ? {} : { prefix: q.prefix }), filters }, o)) {
    if (!memory.has(k.toString())) out.push(k)
  }
  for (const [key, value] of memory) {
    if (value === null || !key.startsWith(prefix)) continue
    const k = new DsKey(key)
    if (filters.every(f => f(k))) out.push(k)
  }
  for (const order of q.orders ?? []) out.sort(order)
  const from = q.offset ?? 0
  yield * out.slice(from, q.limit === undefined ? undefined : from + q.limit)
}
