/**
 * Bounded provider answers: a node answers a provider lookup (GET_PROVIDERS)
 * with at most DHT_PROVIDERS_PER_ANSWER providers of the key, a fresh random
 * pick each time when it holds more, so different askers (and the holders of
 * one key, each with its own pick) spread over all providers. kad-dht answers
 * with every provider it holds and has no option for a limit; the one place
 * both its answer and its own local lookup read is the provider store's
 * `getProviders`, so that is where the limit goes. The shape is checked: when
 * a kad-dht version lacks it, nothing is changed and the caller logs that.
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

/** Limit the providers `dht` names per answer to `max`. False when this kad-dht has no provider store to limit. */
export function limitProviderAnswers (dht: unknown, max: number): boolean {
  const store = providerStoreOf(dht)
  if (store === undefined) return false
  const all = store.getProviders.bind(store)
  store.getProviders = async (key, options) => {
    const found = await all(key, options)
    return found.length <= max ? found : sample(Math.random, found, max)
  }
  return true
}
