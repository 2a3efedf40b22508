/**
 * The memory datastore of an ephemeral node (no data dir) and of
 * simulations: each value kept in a buffer of its own size, and its keys
 * kept sorted, so a prefix query reads only the keys under its prefix.
 *
 * What the DHT and the peer store put is often a small view into a much
 * larger buffer: a record decoded from a 64 KiB network read keeps that
 * whole read alive for as long as it is stored. A heap snapshot of a
 * 43-node simulation process held 118 MiB of such reads through the memory
 * datastore alone (session 6). A disk datastore copies by writing;
 * this one copies a value whose buffer is larger than the value.
 *
 * datastore-core's memory datastore answers every query by walking all its
 * entries (a Key made for each) and filtering them by prefix. kad-dht reads
 * a key's provider records with a prefix query, for its own lookups and for
 * every GET_PROVIDERS it answers; the same store holds the peer store, which
 * grows with the mesh. So each provider read cost time in proportion to the
 * peers a node had met (session 30: 7.5 % of a simulation driver's CPU during
 * discovers at rest, at 50 nodes). Here the keys under a prefix are a
 * contiguous run of the sorted keys, found by binary search, as a LevelDB
 * datastore seeks to them. A query reads the run as it was when the query
 * started; a key deleted while the query is read is left out.
 *
 * The sorted list is brought up to date when a query needs it, not at every
 * put and delete: new keys are merged in and deleted ones dropped in one
 * pass each (MEMORY_STORE_INSERTS_ONE_BY_ONE_MAX, MEMORY_STORE_STALE_KEYS_MIN),
 * so filling the store is not quadratic.
 */
import { BaseDatastore } from 'datastore-core'
import { Key, type Pair, type Query, type KeyQuery } from 'interface-datastore'
import { NotFoundError } from 'interface-store'
import { MEMORY_STORE_INSERTS_ONE_BY_ONE_MAX, MEMORY_STORE_STALE_KEYS_MIN } from './constants.ts'

/** The first index of `sorted` whose key is not before `key`. */
function lowerBound (sorted: readonly string[], key: string): number {
  let lo = 0
  let hi = sorted.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (sorted[mid]! < key) lo = mid + 1
    else hi = mid
  }
  return lo
}

export class CompactMemoryDatastore extends BaseDatastore {
  private readonly data = new Map<string, Uint8Array>()
  /** Keys in string order: every key of `data` but those in `pending`, and the `stale` ones besides. */
  private sorted: string[] = []
  /** Keys put since the last query that are not in `sorted` yet. */
  private readonly pending = new Set<string>()
  /** Keys in `sorted` whose value was deleted: queries skip them until they are dropped. */
  private readonly stale = new Set<string>()

  override put (key: Key, val: Uint8Array, options?: { signal?: AbortSignal }): Key {
    options?.signal?.throwIfAborted()
    const k = key.toString()
    if (!this.data.has(k) && !this.stale.delete(k)) this.pending.add(k)
    // a copy whenever the value is a view into a larger buffer (a Buffer's own slice() is a view too)
    this.data.set(k, val.byteLength < val.buffer.byteLength ? Uint8Array.prototype.slice.call(val) : val)
    return key
  }

  override get (key: Key, options?: { signal?: AbortSignal }): Uint8Array {
    options?.signal?.throwIfAborted()
    const value = this.data.get(key.toString())
    if (value === undefined) throw new NotFoundError()
    return value
  }

  override has (key: Key, options?: { signal?: AbortSignal }): boolean {
    options?.signal?.throwIfAborted()
    return this.data.has(key.toString())
  }

  override delete (key: Key, options?: { signal?: AbortSignal }): void {
    options?.signal?.throwIfAborted()
    const k = key.toString()
    if (!this.data.delete(k)) return
    if (!this.pending.delete(k)) this.stale.add(k)
  }

  /** The sorted list made whole: new keys in, and deleted ones out once they are many. */
  private settle (): void {
    if (this.stale.size >= MEMORY_STORE_STALE_KEYS_MIN && this.stale.size * 2 >= this.sorted.length) {
      this.sorted = this.sorted.filter(k => !this.stale.has(k))
      this.stale.clear()
    }
    if (this.pending.size === 0) return
    if (this.pending.size <= MEMORY_STORE_INSERTS_ONE_BY_ONE_MAX) {
      for (const k of this.pending) this.sorted.splice(lowerBound(this.sorted, k), 0, k)
    } else {
      const add = [...this.pending].sort()
      const merged: string[] = new Array(this.sorted.length + add.length)
      let i = 0
      let j = 0
      let n = 0
      while (i < this.sorted.length && j < add.length) merged[n++] = this.sorted[i]! < add[j]! ? this.sorted[i++]! : add[j++]!
      while (i < this.sorted.length) merged[n++] = this.sorted[i++]!
      while (j < add.length) merged[n++] = add[j++]!
      this.sorted = merged
    }
    this.pending.clear()
  }

  /**
   * The keys under `prefix` (all keys without one), as they are now. Deleted
   * keys met in the range are dropped from the sorted list here: a small
   * prefix whose keys come and go (a queue, a state index) is read in time
   * proportional to what it holds, not to all it ever held.
   */
  private keysUnder (prefix: string | undefined): string[] {
    this.settle()
    const whole = prefix === undefined || prefix === ''
    const start = whole ? 0 : lowerBound(this.sorted, prefix)
    let end = start
    let stale = 0
    while (end < this.sorted.length && (whole || this.sorted[end]!.startsWith(prefix))) {
      if (this.stale.size > 0 && this.stale.has(this.sorted[end]!)) stale++
      end++
    }
    if (stale === 0) return this.sorted.slice(start, end)
    const live: string[] = []
    for (let i = start; i < end; i++) {
      const k = this.sorted[i]!
      if (this.stale.delete(k)) continue
      live.push(k)
    }
    this.sorted = this.sorted.slice(0, start).concat(live, this.sorted.slice(end))
    return live.slice()
  }

  override * _all (q: Query, options?: { signal?: AbortSignal }): Generator<Pair> {
    options?.signal?.throwIfAborted()
    for (const k of this.keysUnder(q.prefix)) {
      const value = this.data.get(k)
      // deleted since the query started
      if (value === undefined) continue
      // a stored key is already clean: Key need not clean it again
      yield { key: new Key(k, false), value }
      options?.signal?.throwIfAborted()
    }
  }

  override * _allKeys (q: KeyQuery, options?: { signal?: AbortSignal }): Generator<Key> {
    options?.signal?.throwIfAborted()
    for (const k of this.keysUnder(q.prefix)) {
      if (!this.data.has(k)) continue
      yield new Key(k, false)
      options?.signal?.throwIfAborted()
    }
  }
}
