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
   * Whether the read must stop before `t`: a run still being saved (or not
   * in the snapshot) has a place between where the listing started on this
   * side (`from`, or its first key for a newest-first page without a cursor)
   * and `t`. Passing it would skip that run for good once it lands.
   */
  before (t: string, from: string | undefined, reverse: boolean): boolean {
    for (const p of this.atStart) if (reverse ? p > t && (from === undefined || p < from) : p < t && (from === undefined || p > from)) return true
    return false
  }
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

  settled (side: RunSide, t: string): void {
    this.pending[side].delete(t)
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
