/**
 * The places of the run index (run-index.ts): the order key a new run gets
 * (`<ISO instant>~<count>~<run id>`, this node's clock when it is indexed,
 * never behind the key before it on its side), and the places a listing must
 * not pass while their runs are still being saved.
 *
 * A LevelDB listing reads the snapshot its iterator took when it opened: a
 * run still being saved then is not in it, even once its save finishes while
 * the page reads on. So a page fences against the runs pending when it
 * began to read a side (`fence`), whether or not they are saved by the time
 * it meets them; a run placed later sorts after every key in that snapshot
 * (the places only move forward).
 */
import type { RunSide } from './run-index.ts'

/** Base-36 digits of the count that orders runs placed at one clock reading (36^8: never outgrown). */
const PLACE_COUNT_DIGITS = 8

/** An order key: the instant, the count of runs placed before at that instant, the run id. */
export function placeKey (iso: string, count: number, runId: string): string {
  return `${iso}~${count.toString(36).padStart(PLACE_COUNT_DIGITS, '0')}~${encodeURIComponent(runId)}`
}

/**
 * Where one page's read of one side must stop for the runs still being saved:
 * the runs pending when the read began. A run placed later sorts after every
 * key of the read's snapshot (the places only move forward), so it can never
 * lie between where the read started and a key it reads.
 */
export class PageFence {
  /** Pending when the read began, minus those the read met (they were in its snapshot after all). */
  private readonly atStart: Set<string>

  constructor (pending: Set<string>) {
    this.atStart = new Set(pending)
  }

  /** Key `t` was read: its run is saved and in the snapshot. */
  read (t: string): void {
    this.atStart.delete(t)
  }

  /**
   * The runs the read must not pass `t` for: still being saved (or not in
   * the snapshot), with a place between where the listing started on this
   * side (`from`, or its first key for a newest-first page without a cursor)
   * and `t`. Passing one would skip that run for good once it lands.
   */
  before (t: string, from: string | undefined, reverse: boolean): string[] {
    return [...this.atStart].filter(p => reverse ? p > t && (from === undefined || p < from) : p < t && (from === undefined || p > from))
  }
}

/** A listing waiting for runs of one side to be saved (RunPlaces.settle). */
interface SettleWaiter {
  side: RunSide
  left: Set<string>
  done: (settled: boolean) => void
}

export class RunPlaces {
  /** Order keys of new runs whose batch is not committed yet, per side (at most the runs being created at once). */
  private readonly pending: Record<RunSide, Set<string>> = { executing: new Set(), delegated: new Set() }
  /** The clock reading the last new run of each side was placed at. */
  private readonly lastPlaced: Record<RunSide, number> = { executing: 0, delegated: 0 }
  /** How many runs were placed at that reading before the last one (the count in its key). */
  private readonly placedInMs: Record<RunSide, number> = { executing: 0, delegated: 0 }

  /**
   * A new run's order key: this node's clock when it is indexed, never behind
   * the key before it on its side. It stays pending (a place a listing must
   * not pass) until `settled`, once its batch is committed or has failed.
   */
  place (side: RunSide, runId: string): string {
    const now = Date.now()
    // strictly after the last: within one millisecond (or a clock that stepped back) a count orders them, not the
    // run id, which could sort a new key before a cursor already given
    if (now > this.lastPlaced[side]) {
      this.lastPlaced[side] = now
      this.placedInMs[side] = 0
    } else {
      this.placedInMs[side]++
    }
    const t = placeKey(new Date(this.lastPlaced[side]).toISOString(), this.placedInMs[side], runId)
    this.pending[side].add(t)
    return t
  }

  /** Listings waiting for pending runs (one per page at most, while it waits). */
  private readonly waiters = new Set<SettleWaiter>()

  settled (side: RunSide, t: string): void {
    this.pending[side].delete(t)
    for (const w of this.waiters) if (w.side === side && w.left.delete(t) && w.left.size === 0) w.done(true)
  }

  /** Listings waiting now. */
  get waiting (): number { return this.waiters.size }

  /** Places still pending on `side` after `t` (oldest first: a listing that read `t` last has them still ahead), from `since` on. */
  pendingAfter (side: RunSide, t: string | undefined, since: string | undefined): string[] {
    return [...this.pending[side]].filter(p => (t === undefined || p > t) && (since === undefined || p >= since))
  }

  /**
   * Whether every run of `places` has been saved (or its write has failed)
   * before `signal` ends: false when it ended first.
   */
  async settle (side: RunSide, places: string[], signal: AbortSignal): Promise<boolean> {
    const left = new Set(places.filter(p => this.pending[side].has(p)))
    if (left.size === 0) return true
    if (signal.aborted) return false
    const { promise, resolve } = Promise.withResolvers<boolean>()
    const waiter: SettleWaiter = { side, left, done: resolve }
    const ended = (): void => { resolve(false) }
    signal.addEventListener('abort', ended, { once: true })
    this.waiters.add(waiter)
    try {
      return await promise
    } finally {
      this.waiters.delete(waiter)
      signal.removeEventListener('abort', ended)
    }
  }

  /** New runs go after `t`, the last order key indexed on the side, whatever this clock says now (it may have stepped back). */
  resume (side: RunSide, t: string): void {
    const parts = t.split('~')
    const at = Date.parse(parts[0] ?? '')
    const count = parseInt(parts[1] ?? '', 36)
    if (Number.isFinite(at)) this.lastPlaced[side] = at
    if (Number.isFinite(count)) this.placedInMs[side] = count
  }

  /** The fence of a page about to read `side`: taken before the read opens its iterator. */
  fence (side: RunSide): PageFence {
    return new PageFence(this.pending[side])
  }
}
