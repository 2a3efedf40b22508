/**
 * The providers a discover has yet to ask for their cards, in round-robin
 * order over the peers whose DHT answers named them: the first provider each
 * peer named, then the second of each, and so on. One peer that names a
 * hundred providers that do not exist (each costing a dial that times out)
 * would otherwise hold the discover's fetches until its list ran out, ahead
 * of every provider an honest peer named after it. How many one peer may
 * name to a discover (DISCOVER_PROVIDERS_PER_PEER_MAX) is the lookup's to
 * bound (src/wire/dht-providers.ts), where a provider past a peer's share stays
 * unnamed for the next peer. This node's own records (no naming peer) are one
 * source among the others.
 *
 * A provider several peers name keeps the earliest rank any of them gives it
 * (`rerank`): a hostile peer that names an honest provider last, behind its
 * own picks that never answer, does not keep it there when honest peers name
 * it first in their answers (before, only the first namer's rank counted, so
 * the honest provider waited behind every dead pick). Within one answer the
 * providers other peers named before are ranked first, its new picks after
 * (src/wire/dht-providers.ts tells them in that order): a provider two peers
 * vouch for goes ahead of those only one does.
 */
import type { PeerId } from '@libp2p/interface'

interface Rank { round: number, source: number }

export class ProviderQueue {
  /** Waiting providers and their ranks, side by side, ordered by rank. */
  private readonly waiting: PeerId[] = []
  private readonly waitingRanks: Rank[] = []
  private readonly ranks = new Map<string, Rank>()
  /** Per naming peer: its place among the sources, and how many providers it named. */
  private readonly sources = new Map<string, { source: number, named: number }>()

  get length (): number { return this.waiting.length }

  /** The waiting providers in the order they are to be asked (a view: `take` removes one). */
  get peers (): readonly PeerId[] { return this.waiting }

  /** Rank `providers` named by `from` (undefined: this node's own records), in the order given; nothing is queued yet. */
  rank (providers: PeerId[], from: PeerId | undefined): void {
    const s = this.source(from)
    for (const p of providers) this.keep(p.toString(), { round: s.named++, source: s.source })
  }

  /**
   * `from` names `providers` too, ranked before (by another peer): each takes
   * its rank among `from`'s picks when that is earlier than the one it has,
   * and moves up if it is waiting.
   */
  rerank (providers: PeerId[], from: PeerId | undefined): void {
    const s = this.source(from)
    const earlier = new Set<string>()
    for (const p of providers) if (this.keep(p.toString(), { round: s.named++, source: s.source })) earlier.add(p.toString())
    const moved: PeerId[] = []
    for (let i = this.waiting.length - 1; i >= 0; i--) if (earlier.has(this.waiting[i]!.toString())) moved.unshift(this.take(i)!)
    this.push(moved)
  }

  /** The naming peer's place among the sources and count of providers it named ('' for this node's own records). */
  private source (from: PeerId | undefined): { source: number, named: number } {
    const key = from === undefined ? '' : from.toString()
    let s = this.sources.get(key)
    if (s === undefined) {
      s = { source: this.sources.size, named: 0 }
      this.sources.set(key, s)
    }
    return s
  }

  /** Give provider `id` rank `r` unless it has an earlier one; whether `r` is its rank now. */
  private keep (id: string, r: Rank): boolean {
    const prev = this.ranks.get(id)
    if (prev !== undefined && !before(r, prev)) return false
    this.ranks.set(id, r)
    return true
  }

  /** Queue ranked providers (again, after a holder did not send their cards) at their rank. */
  push (providers: PeerId[]): void {
    for (const peer of providers) {
      const rank = this.ranks.get(peer.toString()) ?? { round: Number.MAX_SAFE_INTEGER, source: 0 }
      let i = this.waiting.length
      while (i > 0 && before(rank, this.waitingRanks[i - 1]!)) i--
      this.waiting.splice(i, 0, peer)
      this.waitingRanks.splice(i, 0, rank)
    }
  }

  /** The place among the sources of the peer that gave waiting provider `i` its rank (fetch-order.ts: whose turn it is). */
  namerAt (i: number): number {
    return this.waitingRanks[i]?.source ?? -1
  }

  /**
   * Take waiting provider `i` in the turn of its namer: it leaves the place of
   * that namer's first waiting provider, and that namer's providers waiting
   * before it move one of that namer's places down each (to the rank of the
   * next). So a namer's pick asked out of its order (a preferred one,
   * fetch-order.ts) uses that namer's turn, not the next namer's: before, a
   * peer that named one provider that never answers, then providers on
   * connections this node opened, kept the first turn, and the providers the
   * other peers named waited until its picks ran out.
   */
  takeInTurn (i: number): PeerId | undefined {
    const source = this.waitingRanks[i]?.source
    if (source === undefined) return undefined
    const taken = this.waiting[i]
    const places: number[] = []
    for (let j = 0; j <= i; j++) if (this.waitingRanks[j]!.source === source) places.push(j)
    for (let m = places.length - 1; m > 0; m--) {
      const moved = this.waiting[places[m - 1]!]!
      this.waiting[places[m]!] = moved
      this.ranks.set(moved.toString(), this.waitingRanks[places[m]!]!)
    }
    this.take(places[0]!)
    return taken
  }

  take (i: number): PeerId | undefined {
    this.waitingRanks.splice(i, 1)
    return this.waiting.splice(i, 1)[0]
  }
}

function before (a: Rank, b: Rank): boolean {
  return a.round < b.round || (a.round === b.round && a.source < b.source)
}
