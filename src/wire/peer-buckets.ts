/**
 * A token bucket per peer: `burst` at most, refilled at `perHour`, over the
 * `peersTracked` peers heard from last (the least recently heard from is
 * forgotten first; one that comes back starts full). Used to bound what one
 * peer may have this node store (provider-records.ts, value-puts.ts).
 */
const HOUR_MS = 60 * 60 * 1000

export interface PeerBucketBounds {
  burst: number
  perHour: number
  peersTracked: number
}

export class PeerBuckets {
  private readonly buckets = new Map<string, { tokens: number, at: number, told: boolean }>()
  private readonly bounds: PeerBucketBounds
  private readonly now: () => number

  constructor (bounds: PeerBucketBounds, now: () => number = Date.now) {
    this.bounds = bounds
    this.now = now
  }

  /**
   * Take a token of `peer`'s bucket: 'taken', or 'refused' when it is empty
   * ('first-refused' for the first refusal since it last had one).
   */
  take (peer: string): 'taken' | 'refused' | 'first-refused' {
    const t = this.now()
    const held = this.buckets.get(peer)
    const b = held ?? { tokens: this.bounds.burst, at: t, told: false }
    // most recently heard from last: the first in the map is the one to forget
    this.buckets.delete(peer)
    this.buckets.set(peer, b)
    if (held === undefined && this.buckets.size > this.bounds.peersTracked) this.buckets.delete(this.buckets.keys().next().value as string)
    b.tokens = Math.min(this.bounds.burst, b.tokens + (t - b.at) * this.bounds.perHour / HOUR_MS)
    b.at = t
    if (b.tokens < 1) {
      const first = !b.told
      b.told = true
      return first ? 'first-refused' : 'refused'
    }
    b.tokens--
    b.told = false
    return 'taken'
  }
}
