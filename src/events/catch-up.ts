/**
 * The history of an iterator subscription, read at its consumer's pace.
 *
 * A correlation's log may hold far more events than a subscription buffers
 * (EVENTS_MAX_EVENTS_PER_RUN per run, EVENTS_MAX_RUNS_PER_CORRELATION runs),
 * so an iterator subscription does not take its history at subscribe time.
 * It is on the correlation's subscriber list from the start (so the
 * correlation stays tracked and its events keep being stored) but ignores
 * live events while it is behind; each time its consumer has read all it
 * holds, one pull reads the next page from the log.
 *
 * Every pull is a task on the correlation's lock, after the pending event
 * copies are written: events are placed on that lock or while it is idle and
 * stored before its next task, so what a pull reads is the log as placed, and
 * no event falls between the last read and the switch to live delivery. A
 * pull that finds nothing left in any admitted run (a whole round of reads
 * past each run's position) makes the subscription live in the same step.
 * While EVENTS_LOCK_READERS_MAX readers wait on the lock, a pull first waits
 * for it to drain (lock-queues.ts), so a stalled disk under a task many
 * clients read does not queue a task per reader.
 */
import { SYNC_MAX_EVENTS_PER_RESPONSE } from '../constants.ts'
import type { EventLog } from '../runlog/event-log.ts'
import type { Correlations } from './correlations.ts'
import { pullLocked } from './lock-queues.ts'
import type { EventSubscription, HistorySource } from './subscription.ts'
import type { CorrTrack, EventsStats } from './track.ts'

export interface CatchUpInit {
  log: Pick<EventLog, 'read' | 'runsOf'>
  correlations: Pick<Correlations, 'runTrack' | 'flushCopies'>
  /** Where a pull that waited for the lock to drain is counted (stats.lockRefused.pull). */
  stats?: EventsStats
}

export class CatchUp implements HistorySource {
  private readonly t: CorrTrack
  private readonly init: CatchUpInit
  /** The admitted runs of this round, read one after another from the subscription's position. */
  private runs: string[] = []
  private next = 0
  /** Whether this round read any event: a round that read none ends the catch-up. */
  private readAny = true

  constructor (t: CorrTrack, init: CatchUpInit) {
    this.t = t
    this.init = init
  }

  async pull (sub: EventSubscription): Promise<void> {
    await pullLocked(this.t, this.init.stats, () => sub.closed, async () => {
      if (sub.closed) return
      await this.init.correlations.flushCopies()
      sub.settleSupersedes()
      const page = Math.max(1, Math.min(SYNC_MAX_EVENTS_PER_RESPONSE, sub.maxBuffered))
      let queued = 0
      while (queued < page && !sub.closed) {
        if (this.next >= this.runs.length) {
          if (!this.readAny) {
            sub.goLive()
            return
          }
          this.runs = await this.admittedRuns()
          this.next = 0
          this.readAny = false
          continue
        }
        const runId = this.runs[this.next] as string
        const limit = page - queued
        const events = await this.init.log.read(runId, sub.position(runId), limit)
        for (const e of events) sub.acceptHistory(e)
        queued += events.length
        if (events.length > 0) this.readAny = true
        // a short read is the run's end for now; a full one may have more
        if (events.length < limit) this.next++
      }
    })
  }

  /** The runs of the correlation in the log, admitted to its task (protocols/lineage.md), in id order. */
  private async admittedRuns (): Promise<string[]> {
    const held = (await this.init.log.runsOf(this.t.id)).sort()
    const out: string[] = []
    for (const runId of held) {
      const rt = await this.init.correlations.runTrack(this.t, runId)
      if (rt?.lineage === 'admitted') out.push(runId)
    }
    return out
  }
}
