/**
 * Copies of other nodes' events, written to the log in the order they were
 * placed. Copies placed from gossip linger up to EVENTS_COPY_FLUSH_MS in the
 * node's group committer, so run.started and run.completed of a quick run, or
 * the runs of a busy delegator, share one batch with whatever else the node
 * writes meanwhile; the placement does not wait for the write. Every read of
 * the log flushes first, so it never misses what was placed.
 *
 * A copy the committer refuses because STORAGE_QUEUE_MAX_BYTES wait already
 * (a stalled or slow disk) is not kept in memory: its run goes on being placed
 * and delivered, and is fetched again once what waited is written.
 */
import { EVENTS_COPY_FLUSH_MS } from '../constants.ts'
import type { Logger } from '../logger.ts'
import { EventLog } from '../runlog/event-log.ts'
import type { AgentEvent } from '../runlog/types.ts'
import { queueFull, type GroupCommitter, type WriteOp } from '../storage/group-commit.ts'
import type { LocalRuns } from './ports.ts'
import type { CorrTrack, EventsStats, RunTrack } from './track.ts'

export interface CopyHooks {
  /** Fetch a run's events again (the syncer): its copies could not be written. */
  refetch: (t: CorrTrack, rt: RunTrack) => void
  /** A write ended: the correlation may be let go now (it is kept while its copies are written). */
  settled: (t: CorrTrack) => void
}

export class CopyStore {
  private readonly committer: GroupCommitter
  private readonly runs: LocalRuns
  private readonly stats: EventsStats
  private readonly log: Logger
  private readonly hooks: CopyHooks
  /** Runs with copies refused while the committer's queue was full, fetched again once it is written (see refused). */
  private readonly behind = new Map<CorrTrack, Set<RunTrack>>()
  private draining = false

  constructor (committer: GroupCommitter, runs: LocalRuns, stats: EventsStats, log: Logger, hooks: CopyHooks) {
    this.committer = committer
    this.runs = runs
    this.stats = stats
    this.log = log
    this.hooks = hooks
  }

  /** Write placed events behind everything placed before them. Resolves true once written, false if the write failed. */
  async store (t: CorrTrack, events: AgentEvent[], lingerMs = EVENTS_COPY_FLUSH_MS): Promise<boolean> {
    if (events.length === 0) return true
    // a run with a copy refused (see refused) writes nothing more until its log is cut at the hole: a later copy
    // written past it would make the log's head a run's end with events missing below it, for good after a stop
    const behind = this.behind.get(t)
    if (behind !== undefined) {
      const waiting = events.filter(e => { const rt = t.runs.get(e.run_id); return rt !== undefined && behind.has(rt) })
      if (waiting.length > 0) {
        this.refused(t, waiting, new Error('an earlier copy of the run was refused: its later copies wait for the refetch'))
        if (waiting.length === events.length) return false
        events = events.filter(e => !waiting.includes(e))
      }
    }
    const ops: WriteOp[] = []
    for (const e of events) ops.push(...EventLog.writes(e))
    // the track stays while its copies are written: a failed write is fetched again through it, also
    // when the batch held the runs' last events and nothing else would keep the correlation
    t.writing++
    try {
      await this.committer.write(ops, { lingerMs })
    } catch (err) {
      if (queueFull(err)) this.refused(t, events, err)
      else this.failed(t, events, err)
      return false
    } finally {
      t.writing--
      if (t.writing === 0) this.hooks.settled(t)
    }
    for (const e of events) if (e.seq === 1) t.logRuns?.add(e.run_id)
    this.delegated(t, events)
    return true
  }

  /** `store` without lingering, for callers that wait on the write; throws if it failed. */
  async persist (t: CorrTrack, events: AgentEvent[]): Promise<void> {
    if (!await this.store(t, events, 0)) throw new Error('the copies of placed events could not be written')
  }

  /** Resolves once everything placed so far is in the log (rejects if a write failed). */
  async flush (): Promise<void> {
    await this.committer.flush()
  }

  /**
   * A write failed: the runs' heads go back to what the log holds, and the
   * runs are fetched again at once (the fetch loads the head first), so the
   * events are stored again rather than leaving a hole behind. Not on next
   * use only: the failed batch may have held a run's last events, and an
   * ended run is not used again.
   */
  private failed (t: CorrTrack, events: AgentEvent[], err: unknown): void {
    this.stats.copyWriteErrors++
    this.log.warn({ err, correlation_id: t.id, events: events.length }, 'copies of events could not be written; they will be fetched again')
    for (const runId of new Set(events.map(e => e.run_id))) {
      const rt = t.runs.get(runId)
      if (rt !== undefined) this.again(t, rt, Math.max(rt.head?.seq ?? 0, ...events.filter(e => e.run_id === runId).map(e => e.seq)))
    }
  }

  /** Load the run's head again, from the log cut at its first hole up to `placed`, and fetch what follows. */
  private again (t: CorrTrack, rt: RunTrack, placed: number): void {
    // a later batch of the run may still be written: the head load first cuts the log at its hole (event-log.ts cutAtGap)
    rt.cutUpTo = Math.max(rt.cutUpTo ?? 0, placed)
    rt.head = undefined
    rt.headHash = undefined
    rt.headLoaded = false
    this.hooks.refetch(t, rt)
  }

  /**
   * The committer refused the copies: STORAGE_QUEUE_MAX_BYTES wait for the
   * disk already. Unlike a failed write, the runs keep their heads for now,
   * so their events go on being placed and delivered (each copy refused in
   * turn, nothing held for it): a head loaded again now would wait on the
   * stalled disk, on the correlation's lock, with every event behind it
   * queued in memory. Once what waited is written (or failed), the runs are
   * loaded again and fetched like after a failed write. Counted in
   * `copyWriteErrors` (and the committer's `refused`); logged once per stall.
   */
  private refused (t: CorrTrack, events: AgentEvent[], err: unknown): void {
    this.stats.copyWriteErrors++
    if (this.behind.size === 0) this.log.warn({ err, correlation_id: t.id }, 'copies of events are refused while the disk catches up; their runs will be fetched again once it has')
    let runs = this.behind.get(t)
    if (runs === undefined) {
      runs = new Set()
      this.behind.set(t, runs)
    }
    for (const runId of new Set(events.map(e => e.run_id))) {
      const rt = t.runs.get(runId)
      if (rt === undefined) continue
      // keeps the correlation tracked until the run's log is cut at the hole (correlations.ts keep)
      rt.cutUpTo = Math.max(rt.cutUpTo ?? 0, ...events.filter(e => e.run_id === runId).map(e => e.seq))
      runs.add(rt)
    }
    if (this.draining) return
    this.draining = true
    this.committer.flush().catch((flushErr: unknown) => {
      // the failed batch's own writers fetched their runs again; these are fetched below all the same
      this.log.debug({ err: flushErr }, 'a write the refused copies waited on failed')
    }).finally(() => {
      this.draining = false
      this.caughtUp()
    })
  }

  /** What waited when copies were refused is written: their runs are loaded again and fetched. */
  private caughtUp (): void {
    const behind = [...this.behind]
    this.behind.clear()
    for (const [t, runs] of behind) {
      if (t.closed) continue
      for (const rt of runs) if (t.runs.get(rt.run_id) === rt) this.again(t, rt, rt.head?.seq ?? 0)
    }
  }

  /** The delegator's records follow the copies of their runs' events, once those are written. */
  private delegated (t: CorrTrack, events: AgentEvent[]): void {
    if (t.delegated.size === 0) return
    const byRun = new Map<string, AgentEvent[]>()
    for (const e of events) {
      if (!t.delegated.has(e.run_id)) continue
      const list = byRun.get(e.run_id)
      if (list === undefined) byRun.set(e.run_id, [e])
      else list.push(e)
    }
    for (const [runId, list] of byRun) {
      this.runs.delegatedEvents(list).catch((err: unknown) => {
        this.log.warn({ err, run_id: runId }, "the delegator's record of a run could not follow its events")
      })
    }
  }
}
