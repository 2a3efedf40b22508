/**
 * A bound on the DHT card records this node stores for others. kad-dht writes
 * every PUT_VALUE that passes the validator, under its own key, and removes a
 * record only when a GET of that key finds it expired: a stranger that mints a
 * key per card (free) had any number of valid records stored here, each up to
 * CARD_MAX_BYTES, for good. (One peer's puts are bounded too:
 * src/wire/value-puts.ts.)
 *
 * At most DHT_RECORDS_STORED_MAX records are held. A write under a key not
 * held while that many are finds room by a sweep of the records whose card has
 * expired (or no longer decodes), at most once per
 * DHT_RECORDS_SWEEP_MIN_INTERVAL_MS, which also counts the records again.
 * With no room after it, the held record whose key is farthest from this node
 * (kad-dht's XOR distance) goes if the new key is nearer: the keys this node
 * is a replica for are the nearest, and a flood of far keys cannot push them
 * out (a near key costs a stranger a search of about 2^b keys for b bits in
 * common). Else the write is refused (STORAGE_FULL, reason
 * `dht_records_full`), counted and logged, and the writer stores the card at
 * its other replicas. A write that replaces a record held, and this node's
 * own card, never need room.
 */
import { createHash } from 'node:crypto'
import type { AbortOptions } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { Libp2pRecord } from '@libp2p/record'
import type { Datastore, Key } from 'interface-datastore'
import { fromString, toString } from 'uint8arrays'
import { DHT_RECORD_DATASTORE_PREFIX } from '../constants.ts'
import { StorageFullError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { rawKey, readRange } from '../storage/range.ts'
import { cardRecordKey, decodeCardRecord } from './card.ts'
import { DHT_RECORDS_STORED_MAX, DHT_RECORDS_SWEEP_MIN_INTERVAL_MS, RECORD_EVICT_TRIES } from './constants.ts'

export interface RecordCapInit {
  store: Datastore
  log: Logger
  /**
   * Delete the record at `key` under its key's lock: when `deadAt` is given,
   * only if it is still not live then. True when it was deleted.
   */
  remove: (key: Key, deadAt: number | undefined, options?: AbortOptions) => Promise<boolean>
  /** This node's agent id: its distance to keys decides which record goes when full. */
  self?: string
  /** Where to count what was refused, swept and evicted (the node's metrics read it). */
  stats?: RecordCapStats
  /** Records held at most (default DHT_RECORDS_STORED_MAX). */
  max?: number
  now?: () => number
}

/** Records refused for want of room, expired ones a sweep removed, and far ones that gave their place to nearer keys. */
export interface RecordCapStats { refused: number, swept: number, evicted: number }

/** Whether the record stored as `raw` holds a card that is still valid at `now` (its signature is not checked here). */
export function liveRecord (raw: Uint8Array, now: number): boolean {
  try {
    const card = decodeCardRecord(Libp2pRecord.deserialize(raw).value) as { expires_at?: unknown }
    return typeof card.expires_at === 'string' && Date.parse(card.expires_at) > now
  } catch {
    // a record that no longer decodes serves no one: the sweep removes it
    return false
  }
}

/** kad-dht's id of a key: SHA-256 of its bytes. */
function kadId (bytes: Uint8Array): Buffer {
  return createHash('sha256').update(bytes).digest()
}

/** The distance of a record whose key is unknown (not base32, or no `self`): never the farthest. */
const EMPTY = Buffer.alloc(0)

/** The XOR distance of two kad ids, as bytes that compare in order. */
function distance (a: Buffer, b: Buffer): Buffer {
  return Buffer.from(a.map((x, i) => x ^ (b[i] ?? 0)))
}

export class RecordCap {
  readonly stats: RecordCapStats
  private readonly i: RecordCapInit
  private readonly max: number
  private readonly now: () => number
  /** Read once at the first write (again after a read that failed, and at each sweep). */
  private loaded: Promise<void> | undefined
  /**
   * The records held, by datastore key, with their key's distance from this
   * node (empty without `self`): what a full store compares a new key with,
   * without reading the store again. Writes under way count in it.
   */
  private readonly held = new Map<string, Buffer>()
  /** Of those, the writes under way (taken, not yet in the store): a read of the store does not see them. */
  private readonly writing = new Map<string, Buffer>()
  /** What changed while a read of the store runs (a key with its distance, or undefined once gone): the read may have passed it. */
  private changedDuringRead: Map<string, Buffer | undefined> | undefined
  private sweptAt = Number.NEGATIVE_INFINITY
  private readonly selfId: Buffer | undefined
  /** This node's own card record's datastore key: never evicted. */
  private readonly ownKey: string | undefined

  constructor (init: RecordCapInit) {
    this.i = init
    this.stats = init.stats ?? { refused: 0, swept: 0, evicted: 0 }
    this.max = init.max ?? DHT_RECORDS_STORED_MAX
    this.now = init.now ?? Date.now
    this.selfId = init.self === undefined ? undefined : kadId(peerIdFromString(init.self).toMultihash().bytes)
    this.ownKey = init.self === undefined ? undefined : `${DHT_RECORD_DATASTORE_PREFIX}${toString(cardRecordKey(init.self), 'base32')}`
  }

  /**
   * Room for a record at datastore key `key` under DHT key `recordKey` (not
   * held: its writes are serialised by the caller): taken before the write,
   * given back by `released` when the write fails. Throws StorageFullError
   * when there is none and `own` is false.
   */
  async take (own: boolean, key: string, recordKey: Uint8Array | undefined, options?: AbortOptions): Promise<void> {
    await (this.loaded ??= this.load())
    const d = this.distanceOf(recordKey)
    if (this.held.size >= this.max && !own) {
      await this.sweep(options)
      if (this.held.size >= this.max && !await this.evictFarther(d, options)) {
        this.stats.refused++
        if (this.stats.refused === 1 || this.stats.refused % this.max === 0) this.i.log.warn({ held: this.held.size, refused: this.stats.refused }, 'the DHT record store is full: a card record was not stored')
        throw new StorageFullError(`this node holds ${this.held.size} DHT records, its most`, { reason: 'dht_records_full', max: this.max })
      }
    }
    this.held.set(key, d ?? EMPTY)
    this.writing.set(key, d ?? EMPTY)
    this.changedDuringRead?.set(key, d ?? EMPTY)
  }

  /** The write `take` made room for is in the store. */
  written (key: string): void {
    this.writing.delete(key)
  }

  /** A write `take` made room for failed, or the record at `key` was deleted. */
  released (key: string): void {
    this.held.delete(key)
    this.writing.delete(key)
    this.changedDuringRead?.set(key, undefined)
  }

  private distanceOf (recordKey: Uint8Array | undefined): Buffer | undefined {
    return recordKey === undefined || this.selfId === undefined ? undefined : distance(kadId(recordKey), this.selfId)
  }

  /** The records held, read from the store (a failed read is read again at the next write). */
  private async load (): Promise<void> {
    try {
      await this.readHeld()
    } catch (err) {
      // one failed read must not refuse every record after it
      this.loaded = undefined
      throw err
    }
  }

  private async readHeld (): Promise<void> {
    const read = new Map<string, Buffer>()
    // the writes under way count from the start: the read may pass their keys before they land
    const changed = new Map<string, Buffer | undefined>(this.writing)
    this.changedDuringRead = changed
    try {
      for await (const { key } of readRange(this.i.store, { prefix: DHT_RECORD_DATASTORE_PREFIX, values: false })) {
        let bytes: Uint8Array | undefined
        try {
          bytes = fromString(key.slice(DHT_RECORD_DATASTORE_PREFIX.length), 'base32')
        } catch (err) {
          this.i.log.debug({ err, key }, 'a DHT record key is not base32: never evicted for a nearer one')
        }
        read.set(key, this.distanceOf(bytes) ?? EMPTY)
      }
    } finally {
      this.changedDuringRead = undefined
    }
    // what is there now: what the read saw, then what was taken or deleted as it ran (the last word on each key)
    this.held.clear()
    for (const [k, d] of read) this.held.set(k, d)
    for (const [k, d] of changed) {
      if (d === undefined) this.held.delete(k)
      else this.held.set(k, d)
    }
  }

  /** Delete the records whose card has expired, unless a sweep ran less than DHT_RECORDS_SWEEP_MIN_INTERVAL_MS ago. */
  private async sweep (options?: AbortOptions): Promise<void> {
    const now = this.now()
    if (now - this.sweptAt < DHT_RECORDS_SWEEP_MIN_INTERVAL_MS) return
    await this.readHeld()
    // only a sweep whose read succeeded waits out the interval: a failed one is tried again at the next write
    this.sweptAt = now
    const dead: Key[] = []
    for await (const { key, value } of readRange(this.i.store, { prefix: DHT_RECORD_DATASTORE_PREFIX })) {
      if (value === undefined || !liveRecord(value, now)) dead.push(rawKey(key))
    }
    let swept = 0
    // each checked again under its key's lock: a card written there since the read is kept
    for (const key of dead) if (await this.i.remove(key, now, options)) swept++
    this.stats.swept += swept
    if (swept > 0) this.i.log.info({ swept, held: this.held.size }, 'expired DHT card records removed to make room')
  }

  /** Delete the held record farthest from this node when a new key at distance `d` is nearer than it; true when one went. */
  private async evictFarther (d: Buffer | undefined, options?: AbortOptions): Promise<boolean> {
    if (d === undefined) return false
    // another put may have evicted the one picked meanwhile: the next farthest then, a few times at most
    for (let tries = 0; tries < RECORD_EVICT_TRIES; tries++) {
      let farthest: { key: string, d: Buffer } | undefined
      for (const [key, kd] of this.held) {
        if (key !== this.ownKey && kd !== EMPTY && (farthest === undefined || Buffer.compare(kd, farthest.d) > 0)) farthest = { key, d: kd }
      }
      if (farthest === undefined || Buffer.compare(d, farthest.d) >= 0) return false
      if (await this.i.remove(rawKey(farthest.key), undefined, options)) {
        this.stats.evicted++
        return true
      }
      this.held.delete(farthest.key)
      if (this.held.size < this.max) return true
    }
    return false
  }
}
