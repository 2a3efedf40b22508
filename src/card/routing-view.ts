/** What discovery needs of kad-dht's routing table: its size, and an event when a peer enters it. */
export interface RoutingTableView {
  size: number
  addEventListener: (type: 'peer:add', listener: () => void) => void
  removeEventListener: (type: 'peer:add', listener: () => void) => void
}

/**
 * The routing table of a kad-dht instance. The KadDHT interface does not
 * expose it (only SingleKadDHT does), so look for it; without it discovery
 * simply announces without waiting for peers.
 */
export function routingTableOf (dht: object): RoutingTableView | undefined {
  const table: unknown = Reflect.get(dht, 'routingTable')
  if (table instanceof EventTarget && typeof Reflect.get(table, 'size') === 'number') {
    return {
      get size (): number { return Number(Reflect.get(table, 'size')) },
      addEventListener: (type, listener) => { table.addEventListener(type, listener) },
      removeEventListener: (type, listener) => { table.removeEventListener(type, listener) }
    }
  }
  return undefined
}

/** True once `routing` holds a peer (at once when it does); false when `signal` aborts first. */
export async function firstRoutingPeer (routing: RoutingTableView, signal: AbortSignal): Promise<boolean> {
  if (routing.size > 0) return true
  if (signal.aborted) return false
  return new Promise<boolean>(resolve => {
    const done = (added: boolean): void => {
      routing.removeEventListener('peer:add', onAdd)
      signal.removeEventListener('abort', onAbort)
      resolve(added)
    }
    const onAdd = (): void => { done(true) }
    const onAbort = (): void => { done(false) }
    routing.addEventListener('peer:add', onAdd)
    signal.addEventListener('abort', onAbort, { once: true })
  })
}
