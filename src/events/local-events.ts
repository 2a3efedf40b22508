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
 *
 * A read-back that fails (a disk read error, a stretch the log does not
 * return) keeps what it did not take in noted, and is made again after a
 * back-off (EVENTS_LOCAL_READBACK_RETRY_MS doubling to
 * EVENTS_LOCAL_READBACK_RETRY_MAX_MS, counted in stats.readBackErrors). Until
 * a read-back has taken in all that is noted, every later event of the
 * correlation's own runs is noted too, even with the lock idle: taken in at
 * once, it would reach subscribers ahead of the noted ones (they would fail
 * with INTERNAL, reason order). Nothing noted is forgotten while the
 * correlation is tracked.
 */
import { AapError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { AgentEvent, RunState } from '../runlog/types.ts'
import { SYNC_MAX_EVENTS_PER_RESPONSE } from '../constants.ts'
import type { Correlations } from './correlations.ts'
import { EVENTS_LOCAL_READBACK_RETRY_MAX_MS, EVENTS_LOCAL_READBACK_RETRY_MS, EVENTS_LOCK_WAITING_MAX } from './constants.ts'
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

/** A correlation's noted runs, and the read-backs of them that failed in a row. */
interface Noted { runs: Map<string, Behind>, failures: number }

export class LocalEvents {
  private readonly i: LocalEventsInit
  private readonly behind = new WeakMap<CorrTrack, Noted>()

  constructor (init: LocalEventsInit) {
    this.i = init
  }

  /** Take `event` of this node's run into `t`, in order with what waits on its lock. */
  take (t: CorrTrack, event: AgentEvent, state: RunState): void {
    const correlations = this.i.correlations
    // once a run is noted, the correlation's next events are noted too until a read-back has taken in all that
    // is: taken in at once or queued behind it, one of them could come before the events noted ahead of it
    let noted = this.behind.get(t)
    if (noted === undefined && t.lock.busy === 0) {
      this.i.apply(t, event, state)
      correlations.maybeUntrack(t)
      return
    }
    if (noted === undefined && t.lock.waiting < EVENTS_LOCK_WAITING_MAX) {
      void t.lock.run(async () => { this.i.apply(t, event, state) }).finally(() => { correlations.maybeUntrack(t) })
      return
    }
    this.i.stats.lockRefused.local++
    if (noted === undefined) {
      noted = { runs: new Map(), failures: 0 }
      this.behind.set(t, noted)
      // queued behind everything that waits now: what was queued for these runs before is taken in first
      this.queueReadBack(t, noted)
    }
    const b = noted.runs.get(event.run_id)
    if (b === undefined) noted.runs.set(event.run_id, { from: event.seq, upTo: event.seq, state })
    else if (event.seq > b.upTo) {
      b.upTo = event.seq
      b.state = state
    }
  }

  private queueReadBack (t: CorrTrack, noted: Noted): void {
    void t.lock.run(async () => { await this.readBehind(t, noted) }).then(() => {
      noted.failures = 0
    }, (err: unknown) => {
      this.retry(t, noted, err)
    }).finally(() => { this.i.correlations.maybeUntrack(t) })
  }

  /** A read-back failed: what it did not take in stays noted, and it is made again after a back-off. */
  private retry (t: CorrTrack, noted: Noted, err: unknown): void {
    if (t.closed) {
      // let go meanwhile (the node stops, nobody follows the task): nobody is left to hand them to
      this.behind.delete(t)
      this.i.log.debug({ err, correlation_id: t.id }, 'a read-back of this node\'s events failed after its correlation was let go; not made again')
      return
    }
    noted.failures++
    this.i.stats.readBackErrors++
    const delay = Math.min(EVENTS_LOCAL_READBACK_RETRY_MAX_MS, EVENTS_LOCAL_READBACK_RETRY_MS * 2 ** Math.min(30, noted.failures - 1))
    this.i.log.error({ err, correlation_id: t.id, runs: noted.runs.size, failures: noted.failures, retry_ms: delay },
      'events of this node\'s runs could not be read back from the log for their subscribers; they stay noted and are read again later')
    const timer = setTimeout(() => {
      // a correlation let go meanwhile has nobody left to hand them to; a track made again reads its heads from the log
      if (t.closed) {
        this.behind.delete(t)
        return
      }
      this.queueReadBack(t, noted)
    }, delay)
    // a node stopping does not wait for it: stopping closes the track, and the retry then does nothing
    timer.unref?.()
  }

  /**
   * On the lock: take in each noted run's stretch from the log, page by page, until nothing noted is left (what
   * is noted while it reads is read too). A run is let go only once its stretch is in; a failed read throws and
   * leaves the rest noted (the run's head says how far it got).
   */
  private async readBehind (t: CorrTrack, noted: Noted): Promise<void> {
    for (;;) {
      const next = noted.runs.entries().next()
      if (next.done === true) break
      const [runId, b] = next.value
      let after = Math.max(b.from - 1, t.runs.get(runId)?.head?.seq ?? 0)
      while (after < b.upTo) {
        const page = await this.i.correlations.log.read(runId, after, Math.min(SYNC_MAX_EVENTS_PER_RESPONSE, b.upTo - after))
        const last = page.at(-1)
        if (last === undefined) {
          // the run store commits before it tells: a hole here is a fault, said so and read again later
          throw new AapError('INTERNAL', `events ${after + 1} to ${b.upTo} of this node's run ${runId} are missing from its log`, { reason: 'log_hole', run_id: runId, after, up_to: b.upTo })
        }
        for (const e of page) this.i.apply(t, e, e.seq === b.upTo ? b.state : stateAfter(e))
        after = last.seq
        b.from = after + 1
      }
      // no await since the last check: nothing was noted for this run in between
      noted.runs.delete(runId)
    }
    // all is in: from now on the correlation's events are taken in (or queued) again
    if (this.behind.get(t) === noted) this.behind.delete(t)
  }
}
