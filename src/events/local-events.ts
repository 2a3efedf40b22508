/**
 * Events of this node's own runs, taken into their correlation's track
 * (head, lineage, subscribers) in order with everything else placed there:
 * at once when nothing waits on the correlation's lock, else as a task on
 * it. They are in the run log already (the run store commits an event before
 * it tells the events service), so none is kept in memory past the lock's
 * bound: with EVENTS_LOCK_WAITING_MAX waiting (a stalled disk holds the lock,
 * a peer floods the task), an event is not queued; its run is noted, and one
 * task per correlation reads the noted stretch of each run from the log when
 * its turn comes and takes it in as if each event had waited. Nothing is
 * lost, and what waits is one task per correlation and one entry per run of
 * this node's, however fast its runs emit (counted in stats.lockRefused.local).
 */
import type { Logger } from '../logger.ts'
import type { AgentEvent, RunState } from '../runlog/types.ts'
import { SYNC_MAX_EVENTS_PER_RESPONSE } from '../constants.ts'
import type { Correlations } from './correlations.ts'
import { EVENTS_LOCK_WAITING_MAX } from './constants.ts'
import { stateAfter } from './replay.ts'
import type { CorrTrack, EventsStats } from './track.ts'

export interface LocalEventsInit {
  correlations: Pick<Correlations, 'maybeUntrack' | 'log'>
  stats: EventsStats
  log: Logger
  /** Take one event of this node's run into the track, `state` the run's after it (placement.ts). */
  apply: (t: CorrTrack, event: AgentEvent, state: RunState) => void
}

/** The stretch of a run's log not queued: from `from` to `upTo`, the run's state after `upTo`. */
interface Behind { from: number, upTo: number, state: RunState }

export class LocalEvents {
  private readonly i: LocalEventsInit
  private readonly behind = new WeakMap<CorrTrack, Map<string, Behind>>()

  constructor (init: LocalEventsInit) {
    this.i = init
  }

  /** Take `event` of this node's run into `t`, in order with what waits on its lock. */
  take (t: CorrTrack, event: AgentEvent, state: RunState): void {
    const correlations = this.i.correlations
    if (t.lock.busy === 0) {
      this.i.apply(t, event, state)
      correlations.maybeUntrack(t)
      return
    }
    // once a run is noted, the correlation's next events are noted too until the read-back gets its turn: queued
    // behind it, one of them could be taken in before the events noted ahead of it
    if (t.lock.waiting < EVENTS_LOCK_WAITING_MAX && !this.behind.has(t)) {
      void t.lock.run(async () => { this.i.apply(t, event, state) }).finally(() => { correlations.maybeUntrack(t) })
      return
    }
    this.i.stats.lockRefused.local++
    let runs = this.behind.get(t)
    if (runs === undefined) {
      const noted = new Map<string, Behind>()
      runs = noted
      this.behind.set(t, noted)
      // queued behind everything that waits now: what was queued for these runs before is taken in first
      void t.lock.run(async () => { await this.readBehind(t, noted) }).catch((err: unknown) => {
        this.i.log.error({ err, correlation_id: t.id }, 'events of this node\'s runs could not be read back from the log for their subscribers (they are in the log; a follower syncs them)')
      }).finally(() => { correlations.maybeUntrack(t) })
    }
    const b = runs.get(event.run_id)
    if (b === undefined) runs.set(event.run_id, { from: event.seq, upTo: event.seq, state })
    else if (event.seq > b.upTo) {
      b.upTo = event.seq
      b.state = state
    }
  }

  /** On the lock: take in each noted run's stretch from the log, page by page. */
  private async readBehind (t: CorrTrack, runs: Map<string, Behind>): Promise<void> {
    // what is noted from now on waits for the next such task
    if (this.behind.get(t) === runs) this.behind.delete(t)
    for (const [runId, b] of runs) {
      let after = Math.max(b.from - 1, t.runs.get(runId)?.head?.seq ?? 0)
      while (after < b.upTo) {
        const page = await this.i.correlations.log.read(runId, after, Math.min(SYNC_MAX_EVENTS_PER_RESPONSE, b.upTo - after))
        const last = page.at(-1)
        if (last === undefined) {
          // the run store commits before it tells: a hole here is a fault, said so rather than waited on
          this.i.log.error({ correlation_id: t.id, run_id: runId, after, up_to: b.upTo }, 'events of this node\'s run are missing from its log')
          break
        }
        for (const e of page) this.i.apply(t, e, e.seq === b.upTo ? b.state : stateAfter(e))
        after = last.seq
      }
    }
  }
}
