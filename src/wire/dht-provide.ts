/**
 * Providing a key so that its records go out even when the walk is slow.
 *
 * kad-dht's `provide` walks to the key's closest peers and sends ADD_PROVIDER
 * only once the walk has ended, all within the caller's one signal. When the
 * walk outlasts the signal (a busy node, a large mesh), no record is sent at
 * all, although dozens of peers answered the walk. Measured at 500 nodes in
 * one simulation: 18,704 provider walks sent 215 records.
 *
 * Here the walk has its own bound (DHT_PROVIDE_WALK_MS), and ends as soon as
 * it has converged (WalkProgress: the k closest peers answered, and only
 * farther peers are still being asked). If it ends in time,
 * the records go to the peers kad-dht names as closest; if not, to the k
 * peers closest to the key among those that answered it: not the best
 * placement, but a lookup walking toward the key meets them, where before it
 * met nothing. Each record is sent within DHT_PROVIDE_SEND_TIMEOUT_MS of its
 * own. The key is kept among this node's own records first, as kad-dht does,
 * so its reprovider provides it again before the records expire.
 *
 * A caller may name peers to send the record to as well (`also`): those that
 * took the key's earlier records, which keep them and the card they pulled on
 * them whether or not this walk still counts them among the closest.
 *
 * It uses kad-dht members its KadDHT interface does not declare
 * (kad-internals.ts); without them this is kad-dht's own `provide`, its
 * ADD_PROVIDER responses counted.
 */
import { createHash } from 'node:crypto'
import type { PeerId } from '@libp2p/interface'
import { MessageType, type KadDHT } from '@libp2p/kad-dht'
import type { Multiaddr } from '@multiformats/multiaddr'
import type { CID } from 'multiformats/cid'
import { DHT_PROVIDE_SEND_TIMEOUT_MS, DHT_PROVIDE_WALK_MS } from '../constants.ts'
import { kadInternals, NO_PATH } from './kad-internals.ts'

/**
 * What one provide did: records sent to the walk's peers and sends to them that failed (or got no answer in time),
 * the same for the peers named only in `also`, every peer that took a record and every one whose send failed, whether
 * the walk ended before its bound, and whether it ended because it had converged (WalkProgress) rather than by
 * kad-dht's own end.
 */
export interface ProvideOutcome {
  sent: number
  failed: number
  alsoSent: number
  alsoFailed: number
  reached: PeerId[]
  missed: PeerId[]
  walked: boolean
  converged: boolean
}

export interface ProvideOptions {
  /** Bounds the walk (default DHT_PROVIDE_WALK_MS). */
  walkMs?: number
  /** Peers sent the record as well as those the walk names (once each; never this node). */
  also?: PeerId[]
}

const sha256 = (bytes: Uint8Array): Buffer => createHash('sha256').update(bytes).digest()

/** `peer`'s distance to a target (the SHA-256 of a key) in kad-dht's XOR metric. */
function distanceTo (target: Buffer, peer: PeerId): Buffer {
  const d = sha256(peer.toMultihash().bytes)
  for (let i = 0; i < d.length; i++) d[i] = (d[i] ?? 0) ^ (target[i] ?? 0)
  return d
}

/**
 * A walk toward a key, as its events tell it. kad-dht ends a walk only when
 * every request it sent has ended, so one slow peer (a busy node, a dial that
 * hangs) holds the whole walk for up to kad-dht's request timeout although
 * the closest peers answered long before. The walk has converged once k
 * peers answered and every request still out goes to a peer farther from
 * the key than the k-th closest of them: whatever those answer, the k
 * closest that answered stay the same.
 */
export class WalkProgress {
  private readonly target: Buffer
  private readonly k: number
  private readonly self: PeerId
  private readonly distances = new Map<string, Buffer>()
  private readonly out = new Map<string, PeerId>()
  private readonly answered = new Map<string, PeerId>()

  constructor (key: Uint8Array, k: number, self: PeerId) {
    this.target = sha256(key)
    this.k = k
    this.self = self
  }

  /** A request to `peer` started (kad-dht's DIAL_PEER: the dial, then the request). */
  asked (peer: PeerId): void { if (!peer.equals(this.self)) this.out.set(peer.toString(), peer) }
  /** `peer` answered the walk. */
  answer (peer: PeerId): void {
    const id = peer.toString()
    this.out.delete(id)
    if (!peer.equals(this.self)) this.answered.set(id, peer)
  }

  /** The request to `peer` failed. */
  failed (peer: PeerId): void { this.out.delete(peer.toString()) }

  /** The `k` closest peers that answered, in kad-dht's XOR metric (SHA-256 of the key's and the peers' multihash bytes). */
  closest (): PeerId[] { return this.sorted().slice(0, this.k) }

  get converged (): boolean {
    if (this.answered.size < this.k) return false
    const kth = this.distance(this.sorted()[this.k - 1]!)
    for (const p of this.out.values()) if (Buffer.compare(this.distance(p), kth) < 0) return false
    return true
  }

  private sorted (): PeerId[] {
    return [...this.answered.values()].sort((a, b) => Buffer.compare(this.distance(a), this.distance(b)))
  }

  private distance (p: PeerId): Buffer {
    const id = p.toString()
    let d = this.distances.get(id)
    if (d === undefined) {
      d = distanceTo(this.target, p)
      this.distances.set(id, d)
    }
    return d
  }
}

/** `peers` once each, in their order, without `self`. */
function distinct (peers: PeerId[], self: PeerId): PeerId[] {
  const seen = new Map<string, PeerId>()
  for (const p of peers) if (!p.equals(self) && !seen.has(p.toString())) seen.set(p.toString(), p)
  return [...seen.values()]
}

/** Provide `key` (see above); never rejects for a walk that ran out of time, only for the caller's own abort before anything was sent. */
export async function provideKey (dht: KadDHT, self: PeerId, addrs: Multiaddr[], key: CID, signal: AbortSignal, options: ProvideOptions = {}): Promise<ProvideOutcome> {
  const parts = kadInternals(dht)
  if (parts === undefined) {
    // kad-dht's own provide: its walk's peers only, `also` cannot be sent without its network (each counted failed)
    const reached: PeerId[] = []
    for await (const ev of dht.provide(key, { signal })) {
      if (ev.name === 'PEER_RESPONSE' && ev.messageName === 'ADD_PROVIDER') reached.push(ev.from)
    }
    const named = new Set(reached.map(String))
    const missed = distinct(options.also ?? [], self).filter(p => !named.has(p.toString()))
    return { sent: reached.length, failed: 0, alsoSent: 0, alsoFailed: missed.length, reached, missed, walked: true, converged: false }
  }
  const walkMs = options.walkMs ?? DHT_PROVIDE_WALK_MS
  await parts.providers.addProvider(key, self, { signal })
  const target = key.multihash.bytes
  const walk = AbortSignal.any([signal, AbortSignal.timeout(walkMs)])
  const progress = new WalkProgress(target, parts.k, self)
  const final: PeerId[] = []
  let walked = false
  let converged = false
  try {
    for await (const ev of dht.getClosestPeers(target, { signal: walk })) {
      if (ev.name === 'DIAL_PEER') progress.asked(ev.peer)
      else if (ev.name === 'PEER_RESPONSE') progress.answer(ev.from)
      else if (ev.name === 'QUERY_ERROR') progress.failed(ev.from)
      else if (ev.name === 'FINAL_PEER') final.push(ev.peer.id)
      // leaving the loop ends kad-dht's query, and the requests still out with it
      if ((ev.name === 'PEER_RESPONSE' || ev.name === 'QUERY_ERROR') && progress.converged) {
        converged = true
        break
      }
    }
    walked = true
  } catch (err) {
    // the caller's own end stops everything; the walk's bound only ends the walk
    if (signal.aborted) throw err
  }
  const walkTo = distinct(final.length > 0 ? final : progress.closest(), self)
  const named = new Set(walkTo.map(String))
  const to = [...walkTo, ...distinct(options.also ?? [], self).filter(p => !named.has(p.toString()))]
  const msg = { type: MessageType.ADD_PROVIDER, key: target, providers: [{ id: self.toMultihash().bytes, multiaddrs: addrs.map(a => a.bytes) }] }
  const took = await Promise.all(to.map(async (peer): Promise<boolean> => {
    try {
      for await (const ev of parts.network.sendMessage(peer, msg, { signal: AbortSignal.any([signal, AbortSignal.timeout(DHT_PROVIDE_SEND_TIMEOUT_MS)]), path: NO_PATH })) {
        if (ev.name === 'PEER_RESPONSE') return true
      }
    } catch {
      // counted: the outcome's `failed` and `missed` (the caller's stats)
    }
    return false
  }))
  const reached = to.filter((_, i) => took[i] === true)
  const missed = to.filter((_, i) => took[i] !== true)
  const sent = took.slice(0, walkTo.length).filter(t => t).length
  const alsoSent = reached.length - sent
  return { sent, failed: walkTo.length - sent, alsoSent, alsoFailed: to.length - walkTo.length - alsoSent, reached, missed, walked, converged }
}
