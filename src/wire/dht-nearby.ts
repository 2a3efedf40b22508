/**
 * The connected peers nearest a DHT key, for a lookup's first answers.
 *
 * kad-dht starts a walk with the routing table's closest peers to the key,
 * whether or not this node holds a connection to them, so a walk's first
 * round waits for dials. A node under the connection bound holds far fewer
 * connections than the mesh has peers, and the routing table keeps peers it
 * no longer holds a connection to. Yet one of the peers it is connected to
 * is often among the k closest to the key, which hold the key's provider
 * records: of C connections in a mesh of N nodes, none is among the k closest
 * with a chance of about (1 - C/N)^k (at 500 nodes, 64 connections and k = 10
 * about one in four; k = 20, one in sixteen). Such a peer answers at the cost
 * of one request on an open connection.
 *
 * Distances are kad-dht's: XOR of the SHA-256 of the key and of the peer id's
 * multihash. Only peers whose peer-store entry lists the DHT protocol are
 * named (a DHT client, e.g. a node behind a relay, answers no DHT requests).
 *
 * When this node is connected to every peer kad-dht's walk starts with (the
 * routing table's k closest to the key), the walk's first round needs no
 * dial, and the asks would only repeat its requests: then there are none. In
 * a one-process mesh of 100 nodes, where that is mostly so, asking anyway
 * made a discover's first card slower (10.5 to 13.7 ms p50).
 */
import { hash } from 'node:crypto'
import type { Peer, PeerId } from '@libp2p/interface'
import { reasonOf } from '../errors.ts'
import type { Logger } from '../logger.ts'

/** What this needs of the libp2p node. */
export interface NearbyHost {
  /** This node's connections (libp2p's `getPeers` builds new PeerId objects each call). */
  getConnections: () => Array<{ remotePeer: PeerId, status: string }>
  peerStore: { get: (peer: PeerId) => Promise<Peer> }
}

/** kad-dht's id of a key or of a peer id's multihash bytes. */
export function kadIdOf (bytes: Uint8Array): Buffer {
  return hash('sha256', bytes, 'buffer')
}

/**
 * Peer ids' kad ids, per PeerId object: libp2p hands out the same object for
 * a connection's remote peer as long as the connection lives, and a weak map
 * lets the entry go with it.
 */
const peerKadIds = new WeakMap<PeerId, Buffer>()

function peerKadId (peer: PeerId): Buffer {
  let id = peerKadIds.get(peer)
  if (id === undefined) {
    id = kadIdOf(peer.toMultihash().bytes)
    peerKadIds.set(peer, id)
  }
  return id
}

/** Negative when `a` is nearer `target` than `b` (XOR distance, compared byte by byte). */
export function compareDistance (a: Uint8Array, b: Uint8Array, target: Uint8Array): number {
  for (let i = 0; i < target.length; i++) {
    const d = ((a[i] ?? 0) ^ (target[i] ?? 0)) - ((b[i] ?? 0) ^ (target[i] ?? 0))
    if (d !== 0) return d
  }
  return 0
}

/** The open connections' peers, by peer id string. */
function connectedPeers (host: NearbyHost): Map<string, PeerId> {
  const peers = new Map<string, PeerId>()
  for (const c of host.getConnections()) if (c.status === 'open') peers.set(c.remotePeer.toString(), c.remotePeer)
  return peers
}

/**
 * Up to `count` peers this node is connected to that serve `protocol`,
 * nearest `key` (the DHT key's bytes, as kad-dht hashes them) first.
 */
export async function nearestConnected (host: NearbyHost, protocol: string, key: Uint8Array, count: number, log: Logger): Promise<PeerId[]> {
  return rankConnected(host, connectedPeers(host), protocol, kadIdOf(key), count, log)
}

/**
 * The peers a lookup of `key` asks beside kad-dht's walk: none when this
 * node holds a connection to each of the `k` routing-table peers the walk
 * starts with (its first round then needs no dial, and asking more would
 * only add requests), else `nearestConnected`'s among those nearer the key
 * than the farthest of the `k`.
 */
export async function nearbyAsks (host: NearbyHost, table: WalkStart, protocol: string, key: Uint8Array, opts: { count: number, k: number, log: Logger }): Promise<PeerId[]> {
  const target = kadIdOf(key)
  const open = connectedPeers(host)
  const start = table.closestPeers(target, { count: opts.k })
  if (start.every(p => open.has(p.toString()))) return []
  // a peer farther than all the walk starts with is unlikely to keep the key's records
  if (start.length >= opts.k) {
    let limit: Uint8Array | undefined
    for (const p of start) {
      const id = peerKadId(p)
      if (limit === undefined || compareDistance(id, limit, target) > 0) limit = id
    }
    if (limit !== undefined) for (const [id, p] of open) if (compareDistance(peerKadId(p), limit, target) > 0) open.delete(id)
  }
  return rankConnected(host, open, protocol, target, opts.count, opts.log)
}

/** What this reads of kad-dht's routing table: the peers a walk starts with. */
export interface WalkStart {
  closestPeers: (kadId: Uint8Array, options: { count: number }) => PeerId[]
}

async function rankConnected (host: NearbyHost, open: Map<string, PeerId>, protocol: string, target: Uint8Array, count: number, log: Logger): Promise<PeerId[]> {
  const ranked = [...open.values()]
    .map(peer => ({ peer, id: peerKadId(peer) }))
    .sort((a, b) => compareDistance(a.id, b.id, target))
  const out: PeerId[] = []
  for (const { peer } of ranked) {
    if (out.length >= count) break
    try {
      if ((await host.peerStore.get(peer)).protocols.includes(protocol)) out.push(peer)
    } catch (err) {
      // a connected peer identify has not told of yet: it is left out of this lookup's first asks
      log.debug({ peer: peer.toString(), reason: reasonOf(err) }, 'a connected peer is not in the peer store')
    }
  }
  return out
}
