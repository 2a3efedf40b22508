/**
 * A delegator's records of runs it delegated (RunStore.putOutgoing) are
 * readable in memory at once and written behind. A write the store refused
 * (STORAGE_FULL) had left memory ahead of the disk for good: the run missing
 * from the listing and forgotten at a restart, or listed in an old state
 * while liveness had stopped watching it. The newest refused record of each
 * run is kept here and written again, RUN_WRITE_RETRY_MIN_MS apart and
 * doubling to RUN_WRITE_RETRY_MAX_MS, until it lands or a newer record of the
 * run does; `stop` makes one last try.
 */
import type { Logger } from '../logger.ts'
import type { Run } from '../runlog/types.ts'
import { RUN_REFUSED_RECORDS_MAX, RUN_WRITE_RETRY_MAX_MS, RUN_WRITE_RETRY_MIN_MS } from './constants.ts'

export interface RefusedStats {
  /** Records written on a retry. */
  rewritten: number
  /** Records given up past RUN_REFUSED_RECORDS_MAX. */
  givenUp: number
}

/** A refused record: `version` orders the records of a run as they were handed over (RunStore.putOutgoing). */
export interface Refused {
  run: Run
  fresh: boolean
  version: number
}

export class RefusedRecords {
  readonly stats: RefusedStats = { rewritten: 0, givenUp: 0 }
  private readonly records = new Map<string, Refused>()
  /** Writes the record again if `current()` still says it waits (checked on the record's lock). */
  private readonly retry: (r: Refused, current: () => boolean) => Promise<void>
  private readonly log: Logger
  private timer: NodeJS.Timeout | undefined
  private delay = RUN_WRITE_RETRY_MIN_MS
  private stopped = false

  constructor (retry: (r: Refused, current: () => boolean) => Promise<void>, log: Logger) {
    this.retry = retry
    this.log = log
  }

  get size (): number {
    return this.records.size
  }

  refused (run: Run, fresh: boolean, version: number): void {
    const had = this.records.get(run.run_id)
    // refused again on a retry, or an older record refused after a newer one: what waits stays
    if (had !== undefined && had.version >= version) {
      this.schedule()
      return
    }
    this.records.delete(run.run_id)
    // a record refused again keeps its first `fresh`: nothing of the run reached the disk yet
    this.records.set(run.run_id, { run, fresh: had?.fresh ?? fresh, version })
    if (this.records.size > RUN_REFUSED_RECORDS_MAX) {
      const [oldest] = this.records.keys()
      if (oldest !== undefined) {
        this.records.delete(oldest)
        this.stats.givenUp++
        this.log.error({ run_id: oldest, max: RUN_REFUSED_RECORDS_MAX }, 'a delegated run\'s record the disk refused is given up: too many wait to be written again')
      }
    }
    this.schedule()
  }

  /** A record of the run was written: a refused one it is at least as new as waits no more. */
  written (runId: string, version: number): void {
    const had = this.records.get(runId)
    if (had === undefined || had.version > version) return
    this.records.delete(runId)
    if (this.records.size === 0) this.delay = RUN_WRITE_RETRY_MIN_MS
  }

  /** No more retries; one last try of each record (a restart would lose it). */
  async stop (): Promise<void> {
    this.stopped = true
    clearTimeout(this.timer)
    this.timer = undefined
    await this.tryAll()
  }

  private schedule (): void {
    if (this.stopped || this.timer !== undefined) return
    this.timer = setTimeout(() => {
      this.timer = undefined
      void this.tryAll().then(() => {
        this.delay = Math.min(this.delay * 2, RUN_WRITE_RETRY_MAX_MS)
        if (this.records.size > 0) this.schedule()
      })
    }, this.delay)
    this.timer.unref?.()
  }

  private async tryAll (): Promise<void> {
    for (const [runId, r] of [...this.records]) {
      try {
        await this.retry(r, () => this.records.get(runId) === r)
        if (!this.records.has(runId)) this.stats.rewritten++
      } catch (err) {
        // refused again (kept, by putOutgoing) or failed otherwise: said, and tried again next round
        this.log.warn({ err, run_id: runId }, 'a delegated run\'s record the disk refused could not be written again yet')
      }
    }
  }
}
