/**
 * Gossip a correlation's lock is too far behind to queue (placement.ts shed,
 * EVENTS_LOCK_WAITING_MAX), and sync pages it refused (lock-queues.ts,
 * EVENTS_LOCK_SYNCS_MAX): the run is fetched, or the participant's sync made
 * again, once what waits on the lock now has run (a fetch now would wait on
 * the lock too, holding a sync slot). One wait per correlation, with the ids
 * of the runs to fetch then, kept to at most twice the runs the correlation
 * tracks (an evicted run is not fetched), and the participants to sync from
 * (at most the correlation's participants): a stranger minting run ids costs
 * no memory per event while the lock is behind.
 */
import type { CorrTrack, RunTrack } from './track.ts'

interface Wait { runs: Set<string>, agents: Set<string> }

export class ShedFetches {
  private readonly waits = new WeakMap<CorrTrack, Wait>()
  private readonly fetch: (t: CorrTrack, rt: RunTrack) => void
  private readonly sync: (t: CorrTrack, agentId: string) => void

  constructor (fetch: (t: CorrTrack, rt: RunTrack) => void, sync: (t: CorrTrack, agentId: string) => void) {
    this.fetch = fetch
    this.sync = sync
  }

  /** Fetch `rt` once `t`'s lock has run what waits on it now. */
  arm (t: CorrTrack, rt: RunTrack): void {
    const ids = this.wait(t).runs
    ids.add(rt.run_id)
    if (ids.size > 2 * t.runs.size) for (const id of ids) if (!t.runs.has(id)) ids.delete(id)
  }

  /** Sync the correlation from `agentId` (a participant) once `t`'s lock has run what waits on it now. */
  armSync (t: CorrTrack, agentId: string): void {
    if (t.participants.has(agentId)) this.wait(t).agents.add(agentId)
  }

  /** Runs and participants armed on `t` (for tests and stats). */
  armed (t: CorrTrack): number {
    const w = this.waits.get(t)
    return w === undefined ? 0 : w.runs.size + w.agents.size
  }

  private wait (t: CorrTrack): Wait {
    let w = this.waits.get(t)
    if (w === undefined) {
      const armed: Wait = { runs: new Set(), agents: new Set() }
      w = armed
      this.waits.set(t, armed)
      void t.lock.idle().then(() => {
        this.waits.delete(t)
        if (t.closed) return
        for (const id of armed.runs) {
          const now = t.runs.get(id)
          if (now !== undefined) this.fetch(t, now)
        }
        for (const agentId of armed.agents) if (t.participants.has(agentId)) this.sync(t, agentId)
      })
    }
    return w
  }
}
