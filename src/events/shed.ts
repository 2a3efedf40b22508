/**
 * Gossip a correlation's lock is too far behind to queue (placement.ts shed,
 * EVENTS_LOCK_WAITING_MAX): the event is ignored, and its run is fetched
 * once what waits on the lock now has run (a fetch now would wait on the lock
 * too, holding a sync slot). One wait per correlation, with the ids of the
 * runs to fetch then, kept to at most twice the runs the correlation tracks
 * (an evicted run is not fetched): a stranger minting run ids costs no memory
 * per event while the lock is behind.
 */
import type { CorrTrack, RunTrack } from './track.ts'

export class ShedFetches {
  private readonly waits = new WeakMap<CorrTrack, Set<string>>()
  private readonly fetch: (t: CorrTrack, rt: RunTrack) => void

  constructor (fetch: (t: CorrTrack, rt: RunTrack) => void) {
    this.fetch = fetch
  }

  /** Fetch `rt` once `t`'s lock has run what waits on it now. */
  arm (t: CorrTrack, rt: RunTrack): void {
    let ids = this.waits.get(t)
    if (ids === undefined) {
      const armed = new Set<string>()
      ids = armed
      this.waits.set(t, armed)
      void t.lock.idle().then(() => {
        this.waits.delete(t)
        for (const id of armed) {
          const now = t.runs.get(id)
          if (now !== undefined && !t.closed) this.fetch(t, now)
        }
      })
    }
    ids.add(rt.run_id)
    if (ids.size > 2 * t.runs.size) for (const id of ids) if (!t.runs.has(id)) ids.delete(id)
  }

  /** Runs armed on `t` (for tests and stats). */
  armed (t: CorrTrack): number {
    return this.waits.get(t)?.size ?? 0
  }
}
