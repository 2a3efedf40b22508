/**
 * A bound on the provider records other peers store here. kad-dht writes
 * every ADD_PROVIDER whose provider is its sender, for any key, into the
 * datastore, where it stays DHT_PROVIDER_VALIDITY_MS: nothing limits how
 * many one peer sends. Each provider gets a token bucket
 * (DHT_PROVIDER_ADDS_PER_PEER_BURST, refilled at
 * DHT_PROVIDER_ADDS_PER_PEER_PER_HOUR); a record past it is not written,
 * and counted. The bucket wraps the provider store's `addProvider`, outside
 * the hooks of provider-answers.ts, so a record not written tells them
 * nothing. This node's own records are never limited.
 */
import type { PeerId } from '@libp2p/interface'
import { PeerBuckets, type PeerBucketBounds } from './peer-buckets.ts'
import { wrapProviderWrite } from './provider-answers.ts'
import { DHT_PROVIDER_ADDS_PER_PEER_BURST, DHT_PROVIDER_ADDS_PER_PEER_PER_HOUR, DHT_PROVIDER_PEERS_TRACKED } from './network-constants.ts'

export type ProviderRecordBounds = PeerBucketBounds

/** Records other peers' ADD_PROVIDERs stored here, and those refused past their provider's bucket. */
export interface ProviderRecordStats { stored: number, refused: number }

const recordStats = new WeakMap<object, ProviderRecordStats>()

/** What `limitProviderRecords` counted for `dht`; undefined when it was not applied. */
export function providerRecordStats (dht: unknown): ProviderRecordStats | undefined {
  return typeof dht === 'object' && dht !== null ? recordStats.get(dht) : undefined
}

/**
 * Bound the records each other peer has `dht` store (see above); `onRefused`
 * hears of the first record refused from a provider after it had room.
 * False when this kad-dht has no provider store with `addProvider`.
 */
export function limitProviderRecords (dht: unknown, self: PeerId, onRefused: (provider: PeerId) => void, bounds: ProviderRecordBounds = {
  burst: DHT_PROVIDER_ADDS_PER_PEER_BURST, perHour: DHT_PROVIDER_ADDS_PER_PEER_PER_HOUR, peersTracked: DHT_PROVIDER_PEERS_TRACKED
}, now: () => number = Date.now): boolean {
  const store: unknown = (dht as { providers?: unknown } | undefined)?.providers
  if (typeof store !== 'object' || store === null || typeof dht !== 'object' || dht === null) return false
  const stats: ProviderRecordStats = { stored: 0, refused: 0 }
  const buckets = new PeerBuckets(bounds, now)
  const wrapped = wrapProviderWrite(store, 'addProvider', write => async (key, provider, options) => {
    if (provider.equals(self)) return write(key, provider, options)
    const taken = buckets.take(provider.toString())
    if (taken !== 'taken') {
      stats.refused++
      if (taken === 'first-refused') onRefused(provider)
      return
    }
    await write(key, provider, options)
    stats.stored++
  })
  if (wrapped) recordStats.set(dht, stats)
  return wrapped
}
