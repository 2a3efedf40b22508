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
    const key = from === undefined ? '' : from.toString()
    let s = this.sources.get(key)
    if (s === undefined) {
      s = { source: this.sources.size, named: 0 }
      this.sources.set(key, s)
    }
    for (const p of providers) this.ranks.set(p.toString(), { round: s.named++, source: s.source })
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

  take (i: number): PeerId | undefined {
    this.waitingRanks.splice(i, 1)
    return this.waiting.splice(i, 1)[0]
  }
}

function before (a: Rank, b: Rank): boolean {
  return a.round < b.round || (a.round === b.round && a.source < b.source)
}
