/**
 * A bound on the DHT records (PUT_VALUE) one peer may have this node store:
 * a token bucket per sender (DHT_VALUE_PUTS_PER_PEER_BURST, refilled at
 * DHT_VALUE_PUTS_PER_PEER_PER_HOUR, over the last DHT_VALUE_PEERS_TRACKED
 * senders). The node-wide bound on card records held (src/card/record-cap.ts)
 * keeps the store small, and its eviction by distance keeps the records this
 * node is a replica for; this bounds what one peer id may send (new ids cost
 * nothing, so it slows a flood rather than stopping it). A put past its sender's bucket is
 * refused as kad-dht refuses an invalid record (the sender's stream is
 * reset), and counted. An honest peer sends its own card, again when it
 * changes or is republished, and corrections after its lookups: far under it.
 */
import type { PeerId } from '@libp2p/interface'
import { MessageType } from '@libp2p/kad-dht'
import { InvalidRequestError } from '../errors.ts'
import { DHT_VALUE_PEERS_TRACKED, DHT_VALUE_PUTS_PER_PEER_BURST, DHT_VALUE_PUTS_PER_PEER_PER_HOUR } from './network-constants.ts'
import type { Logger } from '../logger.ts'
import { PeerBuckets, type PeerBucketBounds } from './peer-buckets.ts'
import { limitProviderRecords } from './provider-records.ts'

/** PUT_VALUEs other peers sent that were refused past their sender's bucket, since start. */
export interface ValuePutStats { refused: number }

type Handle = (peerId: PeerId, msg: unknown) => Promise<unknown>

const putStats = new WeakMap<object, ValuePutStats>()

/** What `limitValuePuts` counted for `dht`; undefined when it was not applied. */
export function valuePutStats (dht: unknown): ValuePutStats | undefined {
  return typeof dht === 'object' && dht !== null ? putStats.get(dht) : undefined
}

/** kad-dht's PUT_VALUE handler (its rpc's, undeclared by its interface), or undefined when this kad-dht has none of that shape. */
function putValueHandler (dht: unknown): { handle: Handle } | undefined {
  const handlers: unknown = (dht as { rpc?: { handlers?: unknown } } | undefined)?.rpc?.handlers
  if (typeof handlers !== 'object' || handlers === null) return undefined
  const handler: unknown = Reflect.get(handlers, MessageType.PUT_VALUE.toString())
  return typeof (handler as { handle?: unknown } | undefined)?.handle === 'function' ? handler as { handle: Handle } : undefined
}

/**
 * Bound the PUT_VALUEs each other peer has `dht` store (see above); `onRefused`
 * hears of the first put refused from a peer after it had room. False when
 * this kad-dht has no PUT_VALUE handler of the expected shape.
 */
export function limitValuePuts (dht: unknown, onRefused: (peer: PeerId) => void, bounds: PeerBucketBounds = {
  burst: DHT_VALUE_PUTS_PER_PEER_BURST, perHour: DHT_VALUE_PUTS_PER_PEER_PER_HOUR, peersTracked: DHT_VALUE_PEERS_TRACKED
}, now: () => number = Date.now): boolean {
  const handler = putValueHandler(dht)
  if (handler === undefined || typeof dht !== 'object' || dht === null) return false
  const stats: ValuePutStats = { refused: 0 }
  const buckets = new PeerBuckets(bounds, now)
  const handle = handler.handle.bind(handler)
  handler.handle = async (peerId, msg) => {
    const taken = buckets.take(peerId.toString())
    if (taken !== 'taken') {
      stats.refused++
      if (taken === 'first-refused') onRefused(peerId)
      throw new InvalidRequestError(`${peerId.toString()} sent more DHT records than it may have stored here`, { reason: 'too_many_puts' })
    }
    return handle(peerId, msg)
  }
  putStats.set(dht, stats)
  return true
}

/**
 * Both per-peer bounds on what other peers have `dht` store: provider records
 * (provider-records.ts) and PUT_VALUE records (above), each refusal's first
 * per peer logged; a kad-dht lacking what either wraps is said once.
 */
export function limitPeerRecords (dht: unknown, self: PeerId, log: Logger): void {
  const providers = limitProviderRecords(dht, self, peer => { log.info({ peer: peer.toString() }, 'a peer sent more provider records than it may have stored here; the rest are not stored') })
  const values = limitValuePuts(dht, peer => { log.info({ peer: peer.toString() }, 'a peer sent more DHT records than it may have stored here; the rest are refused') })
  if (!providers || !values) log.warn({ providers, values }, 'this kad-dht lacks a provider store or a PUT_VALUE handler to bound: other peers\' records of that kind are stored without a per-peer bound')
}
