/**
 * Gossip a correlation's lock is too far behind to queue (placement.ts shed,
 * EVENTS_LOCK_WAITING_MAX), and sync pages it refused (lock-queues.ts,
 * EVENTS_LOCK_SYNCS_MAX): the run is fetched, or the participant's sync made
 * again, once what waits on the lock now has run (a fetch now would wait on
 * the lock too, holding a sync slot). One wait per correlation, with the ids
 * of the runs to fetch then, kept to at most twice the runs the correlation
 * tracks (an evicted run is not fetched), and the participants to sync from
 * (at most the correlation's participants): a stranger minting run ids costs
 * no memory per event while the lock is behind. A run armed with a
 * relayer's ask (`again`, startless.ts) is fetched by that relayer's ask
 * made again then, within its share (past it, not fetched and counted), so
 * a stranger's run never costs a DHT walk here; a run armed without one
 * (someone vouched for it) is fetched as usual.
 */
import type { StartlessAsk } from './startless.ts'
import type { CorrTrack, RunTrack } from './track.ts'

/** A startless run's relayer's ask, made again when the fetch is (StartlessAsk.again). */
type Retake = () => StartlessAsk | undefined

interface Wait { runs: Map<string, Retake | undefined>, agents: Set<string> }

export class ShedFetches {
  private readonly waits = new WeakMap<CorrTrack, Wait>()
  private readonly fetch: (t: CorrTrack, rt: RunTrack, ask?: StartlessAsk) => void
  private readonly sync: (t: CorrTrack, agentId: string) => void

  constructor (fetch: (t: CorrTrack, rt: RunTrack, ask?: StartlessAsk) => void, sync: (t: CorrTrack, agentId: string) => void) {
    this.fetch = fetch
    this.sync = sync
  }

  /** Fetch `rt` once `t`'s lock has run what waits on it now; by `again`'s ask if given (a startless run's relayer). */
  arm (t: CorrTrack, rt: RunTrack, again?: Retake): void {
    const ids = this.wait(t).runs
    // armed without an ask already (someone vouched for the run): a relayer's ask does not narrow that
    if (!ids.has(rt.run_id) || ids.get(rt.run_id) !== undefined) ids.set(rt.run_id, again)
    if (ids.size > 2 * t.runs.size) for (const id of ids.keys()) if (!t.runs.has(id)) ids.delete(id)
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
      const armed: Wait = { runs: new Map(), agents: new Set() }
      w = armed
      this.waits.set(t, armed)
      void t.lock.idle().then(() => {
        this.waits.delete(t)
        if (t.closed) return
        for (const [id, again] of armed.runs) {
          const now = t.runs.get(id)
          if (now === undefined) continue
          if (again === undefined) {
            this.fetch(t, now)
            continue
          }
          const ask = again()
          if (ask !== undefined) this.fetch(t, now, ask)
        }
        for (const agentId of armed.agents) if (t.participants.has(agentId)) this.sync(t, agentId)
      })
    }
    return w
  }
}
