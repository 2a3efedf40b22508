/**
 * A replica keeps the newest card it can verify. kad-dht stores every PUT_VALUE
 * that passes the namespace validator, without asking the selector, so anyone
 * could replay an older, validly signed card of an agent over the newer one a
 * replica holds and make that replica serve it. This view of the node's
 * datastore, handed to libp2p only, refuses a card record write when the
 * record already held under that key is a valid card with a higher seq (or,
 * on equal seq, the later expiry: compareCards). The remote writer is then
 * answered with an error, as for a record the validator refuses.
 *
 * Only `put` and `delete` are watched: kad-dht writes DHT records one at a
 * time (its rpc handler, its own put and the corrections after a get), never
 * in a batch. Writes of one key run one after the other: the check and the
 * write of one are not interleaved with another's (a replay racing the newer
 * card's put would otherwise be written after it).
 */
import type { AbortOptions } from '@libp2p/interface'
import { Libp2pRecord } from '@libp2p/record'
import type { Datastore, Key } from 'interface-datastore'
import { toString } from 'uint8arrays'
import { CARD_DHT_NAMESPACE, DHT_RECORD_DATASTORE_PREFIX } from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'
import { KeyedMutex } from '../util/concurrency.ts'
import type { Logger } from '../logger.ts'
import { compareCards, decodeCardRecord, verifyCard, type AgentCard } from './card.ts'
import { liveRecord, RecordCap, type RecordCapStats } from './record-cap.ts'

export type { RecordCapStats }

const CARD_KEY_PREFIX = `/${CARD_DHT_NAMESPACE}/`

/** The card in a DHT record, when it is a card record and verifies for the agent its key names. */
async function cardIn (raw: Uint8Array, what: string, log: Logger): Promise<AgentCard | undefined> {
  try {
    const record = Libp2pRecord.deserialize(raw)
    const key = toString(record.key)
    if (!key.startsWith(CARD_KEY_PREFIX)) return undefined
    return await verifyCard(decodeCardRecord(record.value), { expectAgent: key.slice(CARD_KEY_PREFIX.length) })
  } catch (err) {
    // an expired or broken record takes no part in the comparison (the validator judges offered ones)
    log.debug({ err }, `the ${what} DHT record is not a valid card`)
    return undefined
  }
}

/** Whose card is this node's own (its writes are never refused for room), and where to count refusals. */
export interface CardRecordOptions { self?: string, stats?: RecordCapStats, max?: number }

/**
 * `store` as libp2p should see it: card record writes that would go back to an
 * older card are refused, and so are new ones past the bound on records held
 * (record-cap.ts).
 */
export function keepNewestCards (store: Datastore, log: Logger, opts: CardRecordOptions = {}): Datastore {
  const writes = new KeyedMutex()
  const removeHeld = async (key: Key, deadAt: number | undefined, options?: AbortOptions): Promise<boolean> => writes.run(key.toString(), async () => {
    if (!await store.has(key, options) || (deadAt !== undefined && liveRecord(await store.get(key, options), deadAt))) return false
    await store.delete(key, options)
    cap.released(key.toString())
    return true
  })
  const cap = new RecordCap({ store, log, remove: removeHeld, ...opts })
  /** The DHT key a record is stored under, undefined for bytes that are no record (the validator refuses those). */
  const recordKeyOf = (value: Uint8Array): Uint8Array | undefined => {
    try {
      return Libp2pRecord.deserialize(value).key
    } catch (err) {
      log.debug({ err }, 'a DHT record write is no record')
      return undefined
    }
  }
  const put = async (key: Key, value: Uint8Array, options?: AbortOptions): Promise<Key> => {
    if (!key.toString().startsWith(DHT_RECORD_DATASTORE_PREFIX)) return store.put(key, value, options)
    return writes.run(key.toString(), async () => {
      const has = await store.has(key, options)
      const held = has ? await cardIn(await store.get(key, options), 'held', log) : undefined
      const offered = held === undefined ? undefined : await cardIn(value, 'offered', log)
      if (held !== undefined && offered !== undefined && compareCards(held, offered) > 0) {
        log.debug({ agent: held.agent_id, held_seq: held.seq, offered_seq: offered.seq }, 'refused an older card over a newer one')
        throw new InvalidRequestError(`a newer card of ${held.agent_id} is held (seq ${held.seq}); seq ${offered.seq} is stale`, {
          reason: 'stale_seq', held_seq: held.seq, offered_seq: offered.seq
        })
      }
      if (has) return store.put(key, value, options)
      const recordKey = recordKeyOf(value)
      await cap.take(opts.self !== undefined && recordKey !== undefined && toString(recordKey) === `${CARD_KEY_PREFIX}${opts.self}`, key.toString(), recordKey, options)
      try {
        const written = await store.put(key, value, options)
        cap.written(key.toString())
        return written
      } catch (err) {
        cap.released(key.toString())
        throw err
      }
    })
  }
  const remove = async (key: Key, options?: AbortOptions): Promise<void> => {
    if (!key.toString().startsWith(DHT_RECORD_DATASTORE_PREFIX)) return store.delete(key, options)
    await removeHeld(key, undefined, options)
  }
  return new Proxy(store, {
    get (target, prop) {
      if (prop === 'put') return put
      if (prop === 'delete') return remove
      const v: unknown = Reflect.get(target, prop, target)
      return typeof v === 'function' ? (v as (...args: unknown[]) => unknown).bind(target) : v
    }
  })
}
