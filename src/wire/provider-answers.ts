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
 */
import type { PeerId } from '@libp2p/interface'
import { sample } from '../util/sample.ts'

interface ProviderStore {
  getProviders: (key: unknown, options?: unknown) => Promise<PeerId[]>
}

function providerStoreOf (dht: unknown): ProviderStore | undefined {
  const store: unknown = (dht as { providers?: unknown } | undefined)?.providers
  if (typeof store !== 'object' || store === null) return undefined
  return typeof (store as { getProviders?: unknown }).getProviders === 'function' ? store as ProviderStore : undefined
}

/** Providers left out of answers because this node's peer store holds no entry for them. */
export interface ProviderAnswerStats { unknownProviders: number }

const answerStats = new WeakMap<object, ProviderAnswerStats>()
const ownReads = new WeakMap<object, (key: unknown, options?: unknown) => Promise<PeerId[]>>()

/**
 * This node's own records of `key`, at most the answer limit, a random pick,
 * including providers its peer store has no entry for (the caller can still
 * find those through the DHT). Undefined when `limitProviderAnswers` was not applied.
 */
export function ownProviderRecords (dht: unknown): ((key: unknown, options?: unknown) => Promise<PeerId[]>) | undefined {
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
export function limitProviderAnswers (dht: unknown, max: number, known: (peer: PeerId) => Promise<boolean>): boolean {
  const store = providerStoreOf(dht)
  if (store === undefined || typeof dht !== 'object' || dht === null) return false
  const stats: ProviderAnswerStats = { unknownProviders: 0 }
  answerStats.set(dht, stats)
  const all = store.getProviders.bind(store)
  ownReads.set(dht, async (key, options) => {
    const found = await all(key, options)
    return found.length <= max ? found : sample(Math.random, found, max)
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
  const add: unknown = Reflect.get(store, 'addProvider')
  if (typeof add !== 'function') return false
  const write = add.bind(store) as (key: unknown, provider: PeerId, options?: unknown) => Promise<void>
  Reflect.set(store, 'addProvider', async (key: unknown, provider: PeerId, options?: unknown): Promise<void> => {
    await write(key, provider, options)
    if (!provider.equals(self)) listener(provider)
  })
  return true
}
