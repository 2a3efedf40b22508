/**
 * The kad-dht members its KadDHT interface does not declare, which the
 * provider lookup (dht-providers.ts) and the provide (dht-provide.ts) use:
 * its bucket size, its network's one-off requests and messages, and its
 * provider store. Their shape is checked once here; without them a caller
 * falls back to kad-dht's public API.
 */
import type { PeerId } from '@libp2p/interface'
import type { KadDHT, QueryEvent } from '@libp2p/kad-dht'
import type { CID } from 'multiformats/cid'

/** One request outside a kad-dht query has no path of a query; kad-dht marks its own local answers the same way. */
export const NO_PATH = { index: -1, queued: 0, running: 0, total: 0 }

type Path = typeof NO_PATH

export interface KadInternals {
  k: number
  network: {
    sendRequest: (to: PeerId, msg: unknown, options: { signal: AbortSignal, path: Path }) => AsyncIterable<QueryEvent>
    sendMessage: (to: PeerId, msg: unknown, options: { signal: AbortSignal, path: Path }) => AsyncIterable<QueryEvent>
  }
  providers: {
    getProviders: (key: CID, options?: { signal?: AbortSignal }) => Promise<PeerId[]>
    addProvider: (key: CID, provider: PeerId, options?: { signal?: AbortSignal }) => Promise<void>
  }
}

/** `dht`'s undeclared members, or undefined when this kad-dht lacks one of them. */
export function kadInternals (dht: KadDHT): KadInternals | undefined {
  const d = dht as unknown as Partial<Record<keyof KadInternals, unknown>>
  const network = d.network as Partial<Record<keyof KadInternals['network'], unknown>> | undefined
  const providers = d.providers as Partial<Record<keyof KadInternals['providers'], unknown>> | undefined
  if (typeof d.k !== 'number' || typeof network?.sendRequest !== 'function' || typeof network.sendMessage !== 'function' ||
    typeof providers?.getProviders !== 'function' || typeof providers.addProvider !== 'function') return undefined
  return dht as unknown as KadInternals
}

/**
 * `dht`'s member `name` when it is an object with every method in `methods`, or undefined (a kad-dht whose insides
 * differ): the one check behind every view of kad-dht's undeclared parts (its routing table, its network).
 */
export function kadMember<T extends object> (dht: object, name: 'routingTable' | 'network', methods: string[]): T | undefined {
  const member: unknown = Reflect.get(dht, name)
  if (typeof member !== 'object' || member === null) return undefined
  return methods.every(m => typeof Reflect.get(member, m) === 'function') ? member as T : undefined
}

/** What a provider lookup reads of kad-dht's routing table: the contacts closest to a kad id (sha256 of the key). */
export interface KadRoutingTable {
  closestPeers: (kadId: Uint8Array, options: { count: number }) => PeerId[]
}

/** `dht`'s routing table, or undefined when this kad-dht has none of that shape. */
export function kadRoutingTable (dht: KadDHT): KadRoutingTable | undefined {
  return kadMember<KadRoutingTable>(dht, 'routingTable', ['closestPeers'])
}
