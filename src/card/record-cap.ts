/**
 * A bound on the DHT card records this node stores for others. kad-dht writes
 * every PUT_VALUE that passes the validator, under its own key, and removes a
 * record only when a GET of that key finds it expired: a stranger that mints a
 * key per card (free) had any number of valid records stored here, each up to
 * CARD_MAX_BYTES, for good.
 *
 * At most DHT_RECORDS_STORED_MAX records are held. A write under a key not
 * held while that many are finds room by a sweep of the records whose card has
 * expired (or no longer decodes), at most once per
 * DHT_RECORDS_SWEEP_MIN_INTERVAL_MS; with no room after it, the write is
 * refused (STORAGE_FULL, reason `dht_records_full`), counted and logged, and
 * the writer stores the card at its other replicas. A write that replaces a
 * record held, and this node's own card, are never refused.
 */
import type { AbortOptions } from '@libp2p/interface'
import { Libp2pRecord } from '@libp2p/record'
import type { Datastore, Key } from 'interface-datastore'
import { DHT_RECORD_DATASTORE_PREFIX } from '../constants.ts'
import { StorageFullError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { countRange, rawKey, readRange } from '../storage/range.ts'
import { decodeCardRecord } from './card.ts'
import { DHT_RECORDS_STORED_MAX, DHT_RECORDS_SWEEP_MIN_INTERVAL_MS } from './constants.ts'

export interface RecordCapInit {
  store: Datastore
  log: Logger
  /** Delete the record at `key` if it is still not live at `now`, under its key's lock; true when it was deleted. */
  removeDead: (key: Key, now: number, options?: AbortOptions) => Promise<boolean>
  /** Where to count what was refused and swept (the node's metrics read it). */
  stats?: RecordCapStats
  /** Records held at most (default DHT_RECORDS_STORED_MAX). */
  max?: number
  now?: () => number
}

/** Records refused for want of room, and expired ones a sweep removed. */
export interface RecordCapStats { refused: number, swept: number }

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

export class RecordCap {
  readonly stats: RecordCapStats
  private readonly i: RecordCapInit
  private readonly max: number
  private readonly now: () => number
  /** Records held, counted once at the first write. */
  private held: Promise<number> | undefined
  private count = 0
  private sweptAt = Number.NEGATIVE_INFINITY

  constructor (init: RecordCapInit) {
    this.i = init
    this.stats = init.stats ?? { refused: 0, swept: 0 }
    this.max = init.max ?? DHT_RECORDS_STORED_MAX
    this.now = init.now ?? Date.now
  }

  /**
   * Room for a record at a key not held (its key's writes are serialised by
   * the caller): taken before the write, given back by `released` when the
   * write fails. Throws StorageFullError when there is none and `own` is false.
   */
  async take (own: boolean, options?: AbortOptions): Promise<void> {
    await (this.held ??= this.counted())
    if (this.count >= this.max && !own) {
      await this.sweep(options)
      if (this.count >= this.max) {
        this.stats.refused++
        if (this.stats.refused === 1 || this.stats.refused % this.max === 0) this.i.log.warn({ held: this.count, refused: this.stats.refused }, 'the DHT record store is full: a card record was not stored')
        throw new StorageFullError(`this node holds ${this.count} DHT records, its most`, { reason: 'dht_records_full', max: this.max })
      }
    }
    this.count++
  }

  /** A write `take` made room for failed, or a record held was deleted. */
  released (): void {
    this.count = Math.max(0, this.count - 1)
  }

  private async counted (): Promise<number> {
    this.count = await countRange(this.i.store, DHT_RECORD_DATASTORE_PREFIX)
    return this.count
  }

  /** Delete the records whose card has expired, unless a sweep ran less than DHT_RECORDS_SWEEP_MIN_INTERVAL_MS ago. */
  private async sweep (options?: AbortOptions): Promise<void> {
    const now = this.now()
    if (now - this.sweptAt < DHT_RECORDS_SWEEP_MIN_INTERVAL_MS) return
    this.sweptAt = now
    const dead: Key[] = []
    for await (const { key, value } of readRange(this.i.store, { prefix: DHT_RECORD_DATASTORE_PREFIX })) {
      if (value === undefined || !liveRecord(value, now)) dead.push(rawKey(key))
    }
    let swept = 0
    // each checked again under its key's lock: a card written there since the read is kept
    for (const key of dead) if (await this.i.removeDead(key, now, options)) swept++
    this.stats.swept += swept
    if (swept > 0) this.i.log.info({ swept, held: this.count }, 'expired DHT card records removed to make room')
  }
}
