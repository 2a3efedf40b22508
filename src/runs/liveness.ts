/**
 * The delegator's side of liveness (protocols/liveness.md). Every live run
 * this node delegated (running or blocked) is watched: each executor of one
 * is probed every interval with a get_run of one of its live runs, in turn.
 * An answer proves the executor is there (a blocked run waits for its human
 * for as long as it takes); no answer for longer than the bound ends each of
 * its live runs with a verdict: a run.failed (EXECUTOR_LOST) the delegator
 * signs in the executor's place, chained to the last event it holds. The
 * verdict goes to the delegator's record, to the run's subscribers and
 * replays (through `onDeclared`), and to the executor itself once it can be
 * reached again, so it cannot complete the run afterwards. The verdict stands
 * in for an executor that says nothing: when the executor answers with a log
 * of its own past the verdict's `after_seq` (it ended or moved the run before
 * it heard of the verdict), its events replace the verdict here
 * (`reconcile`). Notices stay open across restarts until that is settled.
 */
import type { Connection, PrivateKey } from '@libp2p/interface'
import {
  EXECUTOR_LOST_AFTER_MS, LIVENESS_MAX_CONCURRENT_PROBES, LIVENESS_MAX_WATCHED_RUNS, LIVENESS_NOTICE_MAX_AGE_MS,
  LIVENESS_PROBE_INTERVAL_MS, LIVENESS_PROBE_TIMEOUT_MS
} from '../constants.ts'
import { toAapError, unreached } from '../errors.ts'
import { FAILURE_MESSAGE_MAX_CHARS, LIVENESS_UNREAD_BOUND_FACTOR } from './constants.ts'
import type { Logger } from '../logger.ts'
import { executorOfRun } from '../runlog/event.ts'
import { ticketOf } from '../runlog/ticket.ts'
import { handoffTarget } from '../runlog/handoff.ts'
import { isTerminal, type AgentEvent, type Run, type RunFailure } from '../runlog/types.ts'
import { foldEvent, sameLineage } from './state-machine.ts'
import { checkedEnd } from './fold-checked.ts'
import { EXECUTOR_LOST, signVerdict } from '../runlog/verdict.ts'
import { Limiter } from '../util/concurrency.ts'
import type { MeshHost } from '../wire/host.ts'
import type { CallOptions } from '../wire/rpc.ts'
import type { RunStore } from './store.ts'
import type { OrphanOptions } from './orphans.ts'
import { cutText } from '../util/text.ts'
import { newLivenessStats, type LivenessStats } from './liveness-stats.ts'

export type { LivenessStats }

/** The executor's watch on its blocked runs' delegators (orphans.ts) is set here too. */
export interface LivenessOptions extends OrphanOptions {
  /** No probe reached the executor for this long: its live runs are declared lost (default EXECUTOR_LOST_AFTER_MS). */
  lostAfterMs?: number
  /** How often each executor is probed (default LIVENESS_PROBE_INTERVAL_MS). */
  probeIntervalMs?: number
  /** Open notices held at most; past it the oldest is dropped, as if expired (default LIVENESS_MAX_WATCHED_RUNS). */
  maxNotices?: number
}

/** What the monitor needs from the rest of the node. */
export interface LivenessPorts {
  /** The last event of the run this node holds (the events service's copy), to chain the verdict to. */
  lastEvent: (run: Run) => Promise<AgentEvent | undefined>
  /** A verdict was signed and recorded: deliver it to the run's subscribers and publish it. */
  onDeclared: (verdict: AgentEvent) => Promise<void>
  /** A record ended with no verdict (nothing of the run held here to chain one to): stop waiting for its events. */
  onUnchained: (run: Run) => void
  /**
   * The executor was heard from after a verdict: compare its log with the
   * verdict, and where it signed events of its own from the verdict's seq on,
   * put them in the verdict's place (copies, subscribers, the record).
   * 'behind': its log still ends before the verdict (ask again later).
   */
  reconcile: (verdict: AgentEvent, signal: AbortSignal) => Promise<'kept' | 'superseded' | 'behind'>
}

export interface LivenessInit extends LivenessOptions {
  /** A new connection from an executor counts as a sign of life (a restarted executor dials back before it is probed). */
  host: MeshHost
  agentId: string
  key: PrivateKey
  store: RunStore
  log: Logger
  /** get_run at the run's executor. */
  probe: (runId: string, opts: CallOptions) => Promise<Run>
  /** executor_lost to the run's executor: the verdict, once it is back. */
  notify: (runId: string, verdict: AgentEvent, opts: CallOptions) => Promise<Run>
}

interface ExecutorWatch {
  runs: Set<string>
  lastSeen: number
  probing: boolean
  turn: number
  /** A probe was answered with something other than the run (logged once). */
  answeredUnread?: boolean
}

/** A run declared lost whose executor has not been heard from since; `verdict` null when none could be chained. */
interface Notice { executor: string, verdict: AgentEvent | null, since: number }

export class LivenessMonitor {
  readonly stats: LivenessStats = newLivenessStats()
  readonly lostAfterMs: number
  readonly probeIntervalMs: number
  readonly maxNotices: number
  private readonly i: LivenessInit
  private ports?: LivenessPorts
  private readonly executors = new Map<string, ExecutorWatch>()
  private readonly watched = new Map<string, string>()
  /** Watched runs whose probes have been answered with something other than the run, since when (see LIVENESS_UNREAD_BOUND_FACTOR). */
  private readonly unread = new Map<string, number>()
  /** By run id, oldest first. */
  private readonly notices = new Map<string, Notice>()
  /** Executors whose round of offers is under way. */
  private readonly offering = new Set<string>()
  private readonly limiter = new Limiter(LIVENESS_MAX_CONCURRENT_PROBES)
  /** Rounds of notices apart from probes: a long round (an executor back with many notices) never holds a probe up. */
  private readonly noticeLimiter = new Limiter(LIVENESS_MAX_CONCURRENT_PROBES)
  private readonly stopping = new AbortController()
  private readonly inflight = new Set<Promise<void>>()
  private timer?: ReturnType<typeof setInterval>
  private unlisten?: () => void

  constructor (init: LivenessInit) {
    this.i = init
    this.lostAfterMs = init.lostAfterMs ?? EXECUTOR_LOST_AFTER_MS
    this.probeIntervalMs = init.probeIntervalMs ?? LIVENESS_PROBE_INTERVAL_MS
    this.maxNotices = init.maxNotices ?? LIVENESS_MAX_WATCHED_RUNS
  }

  /** Wire the ports (the events service exists after the run service). */
  connect (ports: LivenessPorts): void {
    this.ports = ports
  }

  async start (): Promise<void> {
    this.unlisten = this.i.store.onOutgoing(run => { this.track(run) })
    this.i.host.addEventListener('connection:open', this.onConnection)
    // verdicts whose executor was not heard from before the node stopped
    // the store reads them by run id: oldest first again, for the bound
    const stored: Array<[string, Notice]> = []
    for await (const { notice, verdict } of this.i.store.notices(this.maxNotices)) {
      stored.push([notice.run_id, { executor: notice.executor, verdict, since: notice.since }])
    }
    stored.sort((a, b) => a[1].since - b[1].since)
    for (const [runId, n] of stored) this.notices.set(runId, n)
    // the live records from the run index, not a scan of every record; after the notices, so the notice of a
    // record live again (its verdict replaced just before a stop) is closed here, not offered
    for await (const run of this.i.store.live('delegated')) this.track(run)
    this.timer = setInterval(() => { this.tick() }, this.probeIntervalMs)
    this.timer.unref?.()
  }

  async stop (): Promise<void> {
    clearInterval(this.timer)
    this.unlisten?.()
    this.i.host.removeEventListener('connection:open', this.onConnection)
    this.stopping.abort(new Error('node stopping'))
    await Promise.allSettled([...this.inflight])
  }

  /** The executors watched now and the runs of each (for tests and the metrics). */
  get watching (): { executors: number, runs: number } {
    return { executors: this.executors.size, runs: this.watched.size }
  }

  /** A connection with an executor opened: it is there, whatever the last probe met. */
  private readonly onConnection = (evt: CustomEvent<Connection>): void => {
    const w = this.executors.get(evt.detail.remotePeer.toString())
    if (w !== undefined) w.lastSeen = Date.now()
  }

  /** A delegated run's record changed: watch it while it is live, from the moment it is first seen. */
  private track (run: Run): void {
    if (run.delegator !== this.i.agentId) return
    const executor = executorOfRun(run.run_id)
    // the record moved (an event, the delegator's own call): whatever the probes met, the run is heard from
    this.unread.delete(run.run_id)
    if (isTerminal(run.state)) {
      if (this.watched.delete(run.run_id)) {
        const w = this.executors.get(executor)
        w?.runs.delete(run.run_id)
        if (w !== undefined && w.runs.size === 0) this.executors.delete(executor)
      }
      return
    }
    // live again (the executor's own events replaced the verdict): the verdict no longer stands, and is not
    // offered to the executor, whose run it would end
    const stale = this.notices.get(run.run_id)
    if (stale !== undefined) {
      this.notices.delete(run.run_id)
      this.stats.superseded++
      this.spawn(async () => { await this.i.store.closeNotice(run.run_id) })
    }
    if (this.watched.has(run.run_id)) {
      // the record moved with the executor's word (its signed events, through any peer, or its answer to a call):
      // it is heard from, though no probe may reach it (a partition that leaves it a path through others)
      const w = this.executors.get(executor)
      if (w !== undefined) w.lastSeen = Date.now()
      return
    }
    if (this.watched.size >= LIVENESS_MAX_WATCHED_RUNS) {
      this.i.log.warn({ run_id: run.run_id, limit: LIVENESS_MAX_WATCHED_RUNS }, 'too many live delegated runs to watch: this one is not probed')
      return
    }
    this.watched.set(run.run_id, executor)
    let w = this.executors.get(executor)
    if (w === undefined) {
      w = { runs: new Set(), lastSeen: Date.now(), probing: false, turn: 0 }
      this.executors.set(executor, w)
    }
    w.runs.add(run.run_id)
  }

  private spawn (fn: () => Promise<void>, limiter = this.limiter): void {
    const p = limiter.run(fn).catch((err: unknown) => {
      this.i.log.error({ err: toAapError(err) }, 'a liveness step failed')
    })
    this.inflight.add(p)
    void p.finally(() => { this.inflight.delete(p) })
  }

  private callOpts (): CallOptions {
    return { signal: this.stopping.signal, callTimeoutMs: LIVENESS_PROBE_TIMEOUT_MS }
  }

  /** One round: probe every executor not being probed, offer pending verdicts. */
  private tick (): void {
    for (const [executor, w] of this.executors) {
      if (w.probing) continue
      w.probing = true
      this.spawn(async () => {
        try {
          await this.probe(executor, w)
        } finally {
          w.probing = false
        }
      })
    }
    // notices: one round per executor at a time, its notices in turn; an executor that is not reached
    // costs one call per interval however many of its runs were declared
    const now = Date.now()
    const due = new Map<string, string[]>()
    for (const [runId, n] of this.notices) {
      if (this.offering.has(n.executor)) continue
      if (now - n.since > LIVENESS_NOTICE_MAX_AGE_MS) {
        this.drop(runId, n, 'a verdict was never seen by its executor')
        this.stats.noticesExpired++
        continue
      }
      const list = due.get(n.executor)
      if (list === undefined) due.set(n.executor, [runId])
      else list.push(runId)
    }
    for (const [executor, runIds] of due) {
      this.offering.add(executor)
      this.stats.noticeRounds++
      this.spawn(async () => {
        try {
          for (const runId of runIds) {
            const n = this.notices.get(runId)
            if (n === undefined) continue
            if (this.stopping.signal.aborted || await this.offer(runId, n) === 'unreached') return
          }
        } finally {
          this.offering.delete(executor)
        }
      }, this.noticeLimiter)
    }
  }

  /** Forget an open notice unseen by its executor (expired, or past the bound). */
  private drop (runId: string, n: Notice, why: string): void {
    this.notices.delete(runId)
    this.i.log.warn({ run_id: runId, executor: n.executor }, why)
    this.spawn(async () => { await this.i.store.closeNotice(runId) })
  }

  private async probe (executor: string, w: ExecutorWatch): Promise<void> {
    const runs = [...w.runs]
    const runId = runs[w.turn++ % runs.length]
    if (runId === undefined || this.stopping.signal.aborted) return
    this.stats.probes++
    // read before the probe: the answer may move the record (RunCaller.control)
    const record = await this.i.store.getOutgoing(runId)
    try {
      // the answer also moves the delegator's record (RunCaller.control), which unwatches an ended run
      const run = await this.i.probe(runId, this.callOpts())
      w.lastSeen = Date.now()
      this.unread.delete(runId)
      if (record !== undefined && !sameRun(record, run, this.i.agentId)) await this.disown(runId, executor, run)
      return
    } catch (err) {
      if (this.stopping.signal.aborted) return
      const e = toAapError(err)
      this.stats.probeFailures++
      if (e.code === 'RUN_NOT_FOUND') {
        // the executor is there, and does not hold the run: it lost it
        w.lastSeen = Date.now()
        await this.declare(runId, executor, 'the executor answers but no longer holds the run', undefined)
        return
      }
      if (!unreached(e)) {
        // an answer, though not a run this node could take (an error of the executor's, or a run its schema
        // refuses): the executor is there, so nothing is declared for it; the run's record stays as it was
        const now = Date.now()
        w.lastSeen = now
        this.stats.probesAnsweredUnread++
        // told once per executor watch: the probe keeps getting the same answer every interval
        if (!w.answeredUnread) this.i.log.warn({ executor, run_id: runId, err: e }, 'a liveness probe was answered with something other than the run: the executor counts as there')
        w.answeredUnread = true
        // but not for good: a run this node can never read again would stay live here forever
        const since = this.unread.get(runId) ?? now
        this.unread.set(runId, since)
        const bound = this.lostAfterMs * LIVENESS_UNREAD_BOUND_FACTOR
        if (now - since >= bound && this.watched.has(runId)) {
          this.unread.delete(runId)
          this.stats.unreadDeclared++
          await this.declare(runId, executor, `the executor answered every probe of the run for ${now - since} ms (bound ${bound} ms) with something other than the run: ${e.code} ${e.message}`, undefined)
        }
        return
      }
      const silent = Date.now() - w.lastSeen
      this.i.log.debug({ executor, silent_ms: silent, err: e }, 'a liveness probe failed')
      if (silent < this.lostAfterMs) return
      for (const id of runs) await this.declare(id, executor, `the executor could not be reached for ${silent} ms (bound ${this.lostAfterMs} ms): ${e.message}`, w)
    }
  }

  /**
   * The executor answered a probe with a run this node did not delegate, or
   * one that does not continue the run the record says it continues (a
   * record kept from a handoff's link, the link a lie): the record was never
   * this node's run, and its executor answering would keep it live here for
   * good. It ends like a run its executor no longer holds, with no verdict:
   * this node is not the run's delegator, so it has nothing to tell its
   * executor, and no event of the run to chain one to.
   */
  private async disown (runId: string, executor: string, answer: Run): Promise<void> {
    const message = `the executor's run is not the one this node holds a record of (delegator ${answer.delegator.slice(0, 80)}, continues ${answer.handoff_from?.run_id.slice(0, 160) ?? 'no run'})`
    const ended = await this.i.store.updateOutgoing(runId, async (prev) => {
      if (prev === undefined || isTerminal(prev.state)) return undefined
      return { ...prev, state: 'failed', failure: { code: EXECUTOR_LOST, message: cutText(message, FAILURE_MESSAGE_MAX_CHARS) }, updated_at: new Date().toISOString() }
    })
    if (ended === undefined) return
    this.stats.disowned++
    this.i.log.warn({ run_id: runId, executor }, `a watched run is not this node's: its record ends: ${message}`)
    this.ports?.onUnchained(ended)
  }

  /** The run's run.started held here carries a valid ticket naming this node as the run's delegator. */
  private async delegatedHere (runId: string): Promise<boolean> {
    const started = await this.i.store.log.get(runId, 1)
    return started !== undefined && ticketOf(started, this.i.agentId)?.delegator === this.i.agentId
  }

  /** End a live delegated run with a verdict. */
  private async declare (runId: string, executor: string, message: string, unreachable: ExecutorWatch | undefined): Promise<void> {
    let verdict: AgentEvent | undefined
    let declared: Run | undefined
    await this.i.store.updateOutgoing(runId, async (prev) => {
      if (prev === undefined || isTerminal(prev.state)) return undefined
      // for unreachability, look again on the record's lock: a sign of life since the probe (a connection it opened) wins
      if (unreachable !== undefined && Date.now() - unreachable.lastSeen < this.lostAfterMs) return undefined
      const head = await this.ports?.lastEvent(prev)
      if (head !== undefined && head.seq > prev.last_seq && (head.type === 'run.completed' || head.type === 'run.failed')) {
        // the run's end is held here and the record had not followed it yet (a restart in between): no verdict
        const ended = checkedEnd(endedBy(prev, head), () => {
          this.stats.malformedEnds++
          this.i.log.warn({ run_id: runId, seq: head.seq }, 'the executor\'s end of a run breaks the run record: kept without what broke it')
        })
        this.stats.endedUnseen++
        this.i.log.info({ run_id: runId, seq: head.seq, state: ended.state }, 'a run about to be declared lost had ended: the record follows its end')
        return ended
      }
      // a record kept from a link alone (a hostile executor's handoff naming another delegator's run): a verdict is
      // the delegator's word, so none is signed; the record ends unchained, as with nothing held
      const chainTo = head !== undefined && await this.delegatedHere(runId) ? head : undefined
      if (head !== undefined && chainTo === undefined) {
        this.stats.notDelegated++
        this.i.log.warn({ run_id: runId, executor }, 'a run about to be declared lost was not delegated by this node (its ticket names another delegator): no verdict')
      }
      if (chainTo !== undefined) {
        verdict = await signVerdict(this.i.key, this.i.agentId, chainTo, message)
        await this.i.store.putVerdict(verdict, { run_id: runId, executor, since: Date.now(), before: prev })
      } else {
        // nothing held to chain a verdict to: the record alone ends, and follows the executor's run once it answers
        this.stats.unchained++
        await this.i.store.putNotice({ run_id: runId, executor, since: Date.now(), before: prev })
      }
      this.stats.declared++
      this.i.log.warn({ run_id: runId, executor, chained: verdict !== undefined }, `declaring a run's executor lost: ${message}`)
      declared = {
        ...prev,
        state: 'failed',
        failure: { code: EXECUTOR_LOST, message: cutText(message, FAILURE_MESSAGE_MAX_CHARS) },
        last_seq: verdict?.seq ?? prev.last_seq,
        updated_at: new Date().toISOString()
      }
      return declared
    })
    if (declared === undefined) return
    this.notices.set(runId, { executor, verdict: verdict ?? null, since: Date.now() })
    for (const [oldest, n] of this.notices) {
      if (this.notices.size <= this.maxNotices) break
      this.drop(oldest, n, 'too many open notices: the oldest verdict is dropped unseen by its executor')
      this.stats.noticesDropped++
    }
    if (verdict === undefined) {
      this.ports?.onUnchained(declared)
      return
    }
    try {
      await this.ports?.onDeclared(verdict)
    } catch (err) {
      this.i.log.warn({ err: toAapError(err), run_id: runId }, 'a verdict could not be handed to the run\'s subscribers')
    }
  }

  /**
   * Tell the executor, if it is back, that its run was declared lost; then
   * settle the verdict against the log it answers from.
   */
  private async offer (runId: string, n: Notice): Promise<'unreached' | 'settled' | 'open'> {
    this.stats.noticeOffers++
    try {
      // without a verdict there is nothing to tell: the executor's answer moves the record (RunCaller.control)
      if (n.verdict === null) await this.i.probe(runId, this.callOpts())
      else await this.i.notify(runId, n.verdict, this.callOpts())
    } catch (err) {
      const e = toAapError(err)
      // a run it does not hold needs no notice
      if (e.code === 'RUN_NOT_FOUND') {
        await this.settled(runId, n, 'delivered')
        return 'settled'
      }
      // not there (yet): the round ends and the next one tries again
      if (unreached(e)) return 'unreached'
      // the executor answered and refused this one: its other notices still go
      this.i.log.warn({ run_id: runId, executor: n.executor, err: e }, 'the executor refused a verdict\'s notice: offered again next round')
      return 'open'
    }
    let outcome: 'kept' | 'superseded' | 'behind' | undefined
    try {
      outcome = n.verdict === null ? 'kept' : await this.ports?.reconcile(n.verdict, this.stopping.signal)
    } catch (err) {
      this.i.log.warn({ run_id: runId, executor: n.executor, err: toAapError(err) }, 'a verdict could not be settled against the executor\'s log: tried again next round')
      return 'open'
    }
    if (outcome === 'behind') return 'open'
    await this.settled(runId, n, outcome === 'superseded' ? 'superseded' : 'delivered')
    return 'settled'
  }

  private async settled (runId: string, n: Notice, how: 'delivered' | 'superseded'): Promise<void> {
    // dropped (the bound) while it was offered: counted and closed there already
    if (this.notices.get(runId) !== n) return
    this.notices.delete(runId)
    await this.i.store.closeNotice(runId)
    this.stats.noticesDelivered++
    if (how === 'superseded') {
      this.stats.superseded++
      this.i.log.warn({ run_id: runId }, 'the executor had signed its own events where the verdict stands: they replace the verdict')
    }
  }

  /** The open notices (tests, the campaign). */
  get openNotices (): number {
    return this.notices.size
  }
}

/**
 * Whether the executor's answer is the run this node's record holds: one
 * this node delegated, continuing the run the record says it continues
 * (fixed when a run is created: a handoff successor's from its ticket).
 */
function sameRun (record: Run, answer: Run, self: string): boolean {
  return answer.delegator === self && sameLineage(record, answer)
}

/** The record of a live run whose end `last` (a run.completed or run.failed) it had not followed yet. */
function endedBy (prev: Run, last: AgentEvent): Run {
  const folded = foldEvent(prev, last)
  if (isTerminal(folded.state)) return folded
  // a step the state machine does not take from the record's stale state: the end is the executor's word
  const failure = last.payload.failure as RunFailure | undefined
  // a handoff's end names the run that goes on: without it the successor would never be watched
  return last.type === 'run.completed'
    ? { ...prev, state: 'completed', output: (last.payload.output ?? null) as Run['output'], handoff_to: handoffTarget(last) ?? prev.handoff_to, last_seq: last.seq, updated_at: last.at }
    : { ...prev, state: 'failed', failure: failure ?? { code: 'INTERNAL', message: 'the run failed' }, last_seq: last.seq, updated_at: last.at }
}
