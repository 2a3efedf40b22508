/**
 * Bounded provider answers: a node answers a provider lookup (GET_PROVIDERS)
 * with at most DHT_PROVIDERS_PER_ANSWER providers of the key, a fresh random
 * pick each time when it holds more, so different askers (and the holders of
 * one key, each with its own pick) spread over all providers. kad-dht answers
 * with every provider it holds and has no option for a limit; the one place
 * both its answer and its own local lookup read is the provider store's
 * `getProviders`, so that is where the limit goes. The shape is checked: when
 * a kad-dht version lacks it, nothing is changed and the caller logs that.
 * That is also where providers without a peer-store entry are left out.
 *
 * It is also where a key's records are read once for many answers. kad-dht
 * reads every record of the key from the datastore for each answer, parsing
 * each record's key back into a peer id, so a holder of a capability that
 * many agents offer spent time on each GET_PROVIDERS in proportion to them
 * (session 30: 17 % of a simulation group process's busy time during
 * discovers at rest, at 100 nodes). The list read is kept for
 * DHT_PROVIDER_READ_TTL_MS, for DHT_PROVIDER_READS_CACHED keys at most, and
 * dropped when a record of its key is added or removed through the provider
 * store. kad-dht's cleanup deletes expired records from the datastore
 * directly: an answer may name such a provider for that long after.
 */
import type { PeerId } from '@libp2p/interface'
import { bytesKey } from '../util/bytes-key.ts'
import { sample, seededPick } from '../util/sample.ts'
import { DHT_PROVIDER_READ_TTL_MS, DHT_PROVIDER_READS_CACHED } from './network-constants.ts'

interface ProviderStore {
  getProviders: (key: unknown, options?: unknown) => Promise<PeerId[]>
}

type ReadProviders = (key: unknown, options?: unknown) => Promise<PeerId[]>

/**
 * What names a provider key to the cache: its multihash, as kad-dht's own
 * record keys do (an ADD_PROVIDER carries only the multihash, so the CID it
 * decodes may differ from the asker's in version or codec).
 */
function keyOf (key: unknown): string {
  const bytes: unknown = (key as { multihash?: { bytes?: unknown } } | null | undefined)?.multihash?.bytes
  return bytes instanceof Uint8Array ? bytesKey(bytes) : String(key)
}

/** The providers of recently read keys (see above). `now` is the clock (tests move it). */
class ProviderReads {
  private readonly lists = new Map<string, { at: number, providers: readonly PeerId[] }>()
  /** Moves on each change: a read that began before one is not kept. */
  private changes = 0
  private readonly read: ReadProviders
  private readonly now: () => number

  constructor (read: ReadProviders, now: () => number) {
    this.read = read
    this.now = now
  }

  async get (key: unknown, options?: unknown): Promise<readonly PeerId[]> {
    const id = keyOf(key)
    const at = this.now()
    const held = this.lists.get(id)
    if (held !== undefined && at - held.at < DHT_PROVIDER_READ_TTL_MS) return held.providers
    const changes = this.changes
    const providers = await this.read(key, options)
    if (changes === this.changes) {
      this.lists.delete(id)
      this.lists.set(id, { at, providers })
      // the oldest read goes first
      if (this.lists.size > DHT_PROVIDER_READS_CACHED) this.lists.delete(this.lists.keys().next().value as string)
    }
    return providers
  }

  changed (key: unknown): void {
    this.changes++
    this.lists.delete(keyOf(key))
  }
}

/** A provider store's write: addProvider or removeProvider (key, provider, options). */
export type ProviderWrite = (key: unknown, provider: PeerId, options?: unknown) => Promise<void>

/**
 * Replace `store`'s write method `name` by `wrap` of it (the one place the
 * provider store's writes are hooked: here and in provider-records.ts).
 * False when the store has no such method.
 */
export function wrapProviderWrite (store: object, name: 'addProvider' | 'removeProvider', wrap: (write: ProviderWrite) => ProviderWrite): boolean {
  const method: unknown = Reflect.get(store, name)
  if (typeof method !== 'function') return false
  Reflect.set(store, name, wrap(method.bind(store) as ProviderWrite))
  return true
}

/** Make `store`'s write `name` call `after` with its key and provider once the write succeeded. */
function afterWrite (store: object, name: 'addProvider' | 'removeProvider', after: (key: unknown, provider: PeerId) => void): boolean {
  return wrapProviderWrite(store, name, write => async (key, provider, options) => {
    await write(key, provider, options)
    after(key, provider)
  })
}

function providerStoreOf (dht: unknown): ProviderStore | undefined {
  const store: unknown = (dht as { providers?: unknown } | undefined)?.providers
  if (typeof store !== 'object' || store === null) return undefined
  return typeof (store as { getProviders?: unknown }).getProviders === 'function' ? store as ProviderStore : undefined
}

/** Providers left out of answers because this node's peer store holds no entry for them. */
export interface ProviderAnswerStats { unknownProviders: number }

const answerStats = new WeakMap<object, ProviderAnswerStats>()
/** Reads this node's own records of a key (`ownProviderRecords`); `seed`: the asker's (util/sample.ts seededPick). */
export type OwnRecords = (key: unknown, options?: unknown, seed?: string) => Promise<PeerId[]>

const ownReads = new WeakMap<object, OwnRecords>()

/**
 * This node's own records of `key`, at most the answer limit, including
 * providers its peer store has no entry for (the caller can still find those
 * through the DHT): a random pick, or with a `seed` the records that rank
 * lowest under it, so every holder asked with one seed picks the same of the
 * records it shares with the others (get_held_cards by key, protocols/card.md).
 * Undefined when `limitProviderAnswers` was not applied.
 */
export function ownProviderRecords (dht: unknown): OwnRecords | undefined {
  return typeof dht === 'object' && dht !== null ? ownReads.get(dht) : undefined
}

/** What `limitProviderAnswers` left out for `dht`; zeros when it was not applied. */
export function providerAnswerStats (dht: unknown): ProviderAnswerStats {
  return (typeof dht === 'object' && dht !== null ? answerStats.get(dht) : undefined) ?? { unknownProviders: 0 }
}

/**
 * Limit the providers `dht` names per answer to `max`, and name only providers
 * `known` says the peer store holds. kad-dht looks each named provider up in
 * its peer store and fails the whole answer when one is missing (a record
 * outlives its provider's peer entry: 12 h against 6 h without contact), so
 * one stale record hid every other provider the node holds for the key.
 * False when this kad-dht has no provider store to limit.
 */
export function limitProviderAnswers (dht: unknown, max: number, known: (peer: PeerId) => Promise<boolean>, now: () => number = Date.now): boolean {
  const store = providerStoreOf(dht)
  if (store === undefined || typeof dht !== 'object' || dht === null) return false
  const stats: ProviderAnswerStats = { unknownProviders: 0 }
  answerStats.set(dht, stats)
  const reads = new ProviderReads(store.getProviders.bind(store), now)
  afterWrite(store, 'addProvider', key => { reads.changed(key) })
  afterWrite(store, 'removeProvider', key => { reads.changed(key) })
  const all = reads.get.bind(reads)
  ownReads.set(dht, async (key, options, seed) => {
    const found = await all(key, options)
    if (found.length <= max) return [...found]
    return seed === undefined ? sample(Math.random, found, max) : seededPick(seed, found, max, p => p.toString())
  })
  store.getProviders = async (key, options) => {
    const found = await all(key, options)
    // in a random order, the first `max` the peer store knows
    const out: PeerId[] = []
    for (const peer of found.length <= max ? found : sample(Math.random, found, found.length)) {
      if (out.length >= max) break
      if (await known(peer)) out.push(peer)
      else stats.unknownProviders++
    }
    return out
  }
  return true
}

/**
 * Call `listener` with every provider record another peer stores here
 * (kad-dht's ADD_PROVIDER: the provider itself, over its own connection),
 * once the record is written. This node's own records are not reported.
 * False when this kad-dht has no provider store to watch.
 */
export function watchProviderRecords (dht: unknown, self: PeerId, listener: (provider: PeerId) => void): boolean {
  const store: unknown = (dht as { providers?: unknown } | undefined)?.providers
  if (typeof store !== 'object' || store === null) return false
  return afterWrite(store, 'addProvider', (_key, provider) => { if (!provider.equals(self)) listener(provider) })
}
