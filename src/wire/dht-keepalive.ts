/**
 * kad-dht's closest peers are valued, not kept alive.
 *
 * Every few seconds kad-dht tags the peers closest to this node with
 * `kad-close` (a value) and `keep-alive-kad-dht`. libp2p's reconnect queue
 * redials a peer with a keep-alive tag whenever its last connection closes,
 * whoever closed it. Under a connection budget (budget.ts) on both sides that
 * is a loop: the other node closes a connection it values least, this node
 * redials at once, and the other closes it again once its grace has passed.
 * In a 100-node simulation those redials were 407 of 5,353 dials.
 *
 * Here kad-dht's peer-store writes go through with their keep-alive tags left
 * out. The `kad-close` value stays, so the budget still keeps those peers
 * before one-off ones; kad-dht dials a closest peer when a lookup needs it,
 * as it does any other.
 */
import { KEEP_ALIVE, type PeerData } from '@libp2p/interface'
import type { KadDHT, KadDHTComponents } from '@libp2p/kad-dht'

type PeerStore = KadDHTComponents['peerStore']

/** A peer-store write without its keep-alive tags (the same object when it has none). */
export function withoutKeepAliveTags (data: PeerData): PeerData {
  const tags = data.tags
  if (tags === undefined) return data
  const entries = tags instanceof Map ? [...tags] : Object.entries(tags)
  if (!entries.some(([k]) => k.startsWith(KEEP_ALIVE))) return data
  return { ...data, tags: Object.fromEntries(entries.filter(([k]) => !k.startsWith(KEEP_ALIVE))) }
}

function storeWithoutKeepAlive (store: PeerStore): PeerStore {
  return new Proxy(store, {
    get (target, prop, receiver) {
      if (prop === 'merge') return async (peer: Parameters<PeerStore['merge']>[0], data: Parameters<PeerStore['merge']>[1], options?: Parameters<PeerStore['merge']>[2]) => target.merge(peer, withoutKeepAliveTags(data), options)
      if (prop === 'patch') return async (peer: Parameters<PeerStore['patch']>[0], data: Parameters<PeerStore['patch']>[1], options?: Parameters<PeerStore['patch']>[2]) => target.patch(peer, withoutKeepAliveTags(data), options)
      const value: unknown = Reflect.get(target, prop, receiver)
      return typeof value === 'function' ? value.bind(target) : value
    }
  })
}

/** kad-dht's factory, with a peer store that leaves its keep-alive tags out. */
export function dhtWithoutKeepAlive (factory: (components: KadDHTComponents) => KadDHT): (components: KadDHTComponents) => KadDHT {
  return (components) => {
    const peerStore = storeWithoutKeepAlive(components.peerStore)
    return factory(new Proxy(components, {
      get (target, prop, receiver) {
        return prop === 'peerStore' ? peerStore : Reflect.get(target, prop, receiver)
      }
    }))
  }
}
