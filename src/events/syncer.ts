/**
 * When and from whom the events service syncs: a correlation from one
 * participant (coalesced), one run's tail from its executor (then from other
 * participants when the executor cannot answer), a participant that just
 * joined the topic, and the tail timer that keeps looking while a run may
 * still move. At most SYNC_CONCURRENCY syncs (dials included) run at once for
 * all correlations, SYNC_CONCURRENCY_PER_AGENT of them with any one agent;
 * every failure is counted by error code.
 */
import {
  EVENTS_JOIN_SYNC_DELAY_MS, EVENTS_TAIL_SYNC_JITTER, EVENTS_TAIL_SYNC_MAX_MS, EVENTS_TAIL_SYNC_MIN_MS, LIVENESS_NOTICE_MAX_AGE_MS, SYNC_CONCURRENCY
} from '../constants.ts'
import { toAapError } from '../errors.ts'
import { peerIdOfAgent } from '../identity/identity.ts'
import type { Logger } from '../logger.ts'
import type { AgentEvent } from '../runlog/types.ts'
import { isVerdict } from '../runlog/verdict-shape.ts'
import { KeyedLimiter, Limiter } from '../util/concurrency.ts'
import { EVENTS_JOIN_WATCH_EVERY_MS, EVENTS_QUIET_WATCH_MS, EVENTS_VERDICT_SYNC_MAX_MS, SYNC_CONCURRENCY_PER_AGENT } from './constants.ts'
import { LockBusyError, placeSynced } from './lock-queues.ts'
import { ShedFetches } from './shed.ts'
import type { StartlessAsk } from './startless.ts'
import type { SyncClient } from './sync.ts'
import { isInterested, isLive, isStartless, vouchedParticipants, type CorrTrack, type EventsStats, type RunTrack } from './track.ts'

/** What the syncer needs from the rest of the service. */
export interface SyncTarget {
  readonly running: boolean
  /** Place verified, chain-checked events from a sync; returns those new here. */
  ingest: (t: CorrTrack, events: AgentEvent[]) => Promise<AgentEvent[]>
  /** The run's track with its head loaded from the log. */
  runTrack: (t: CorrTrack, runId: string) => Promise<RunTrack | undefined>
  /** A fetch ended: the correlation may be let go if nothing keeps it (a followed run that had ended already). */
  settled: (t: CorrTrack) => void
}

export class Syncer {
  private readonly limiter = new Limiter(SYNC_CONCURRENCY)
  private readonly perAgent = new KeyedLimiter(SYNC_CONCURRENCY_PER_AGENT)
  private readonly client: SyncClient
  private readonly target: SyncTarget
  private readonly stats: EventsStats
  private readonly log: Logger
  /** Syncs whose page the correlation's lock was too far behind to take (lock-queues.ts): made again once it drains. */
  private readonly afterLock = new ShedFetches((t, rt, ask) => { this.fetch(t, rt, ask) }, (t, agentId) => { this.syncCorrelationFrom(t, agentId) })
  /**
   * The ask for a run's next fetch round, asked for while its fetch was in
   * flight: the latest relayer's (startless.ts), or null when a caller asked
   * without one (someone vouched for the run: its executor is asked as usual).
   */
  private readonly nextAsk = new WeakMap<RunTrack, StartlessAsk | null>()

  constructor (client: SyncClient, target: SyncTarget, stats: EventsStats, log: Logger) {
    this.client = client
    this.target = target
    this.stats = stats
    this.log = log
  }

  /**
   * A sync failed. The agent is remembered as unreached (replay names it)
   * unless `listed` is false: the executor of a run known only from its own
   * events (a stranger, one per key it makes) is counted, not listed, so the
   * map stays bounded by the correlation's participants and proven runs.
   */
  /** Run one sync with `agentId` in a slot: its agent's share first, then one of the node's (waiting for the share holds none of those). */
  async slot<T> (agentId: string, fn: () => Promise<T>): Promise<T> {
    return this.perAgent.run(agentId, async () => this.limiter.run(fn))
  }

  /** Place a sync's page on the correlation's lock, or LockBusyError while EVENTS_LOCK_SYNCS_MAX are placed or wait there; how many were new here. */
  private async place (t: CorrTrack, events: AgentEvent[]): Promise<number> {
    return (await placeSynced(t, this.stats, async () => this.target.ingest(t, events))).length
  }

  private noteSyncError (t: CorrTrack, err: unknown, what: 'correlation' | 'run', agentId: string, listed = true): void {
    const e = toAapError(err)
    this.stats.syncErrors[e.code] = (this.stats.syncErrors[e.code] ?? 0) + 1
    // a failed whole-correlation ask is not undone by a run's tail the agent answered later (it says less)
    if (listed && (what === 'correlation' || t.unreached.get(agentId)?.what !== 'correlation')) t.unreached.set(agentId, { code: e.code, at: Date.now(), what })
    this.log.debug({ code: e.code, reason: e.details?.reason, agent_id: agentId, what }, 'a sync failed')
  }

  /** Run background work of a track, remembered so replay and subscribe can wait for it. */
  spawn (t: CorrTrack, fn: () => Promise<void>): void {
    const p = fn().catch((err: unknown) => {
      // each sync counts its own failures; what reaches here is a fault of the service itself
      this.log.error({ err, correlation_id: t.id }, 'a background sync task failed')
    })
    t.inflight.add(p)
    void p.finally(() => { t.inflight.delete(p) })
  }

  /** Wait until the track's background syncs are done (and those they start), in bounded rounds. */
  async awaitSyncs (t: CorrTrack, deadline: number, rounds: number): Promise<void> {
    for (let i = 0; i < rounds * 4 && t.inflight.size > 0; i++) {
      const left = deadline - Date.now()
      if (left <= 0) return
      let timer: ReturnType<typeof setTimeout> | undefined
      const expired = new Promise<void>(resolve => { timer = setTimeout(resolve, left) })
      await Promise.race([Promise.allSettled([...t.inflight]), expired])
      clearTimeout(timer)
    }
  }

  /**
   * After a replay's rounds (begun at `since`): ask once more, within
   * `deadline`, whoever did not answer, rather than leave it to a tail round
   * after the replay: a participant for the whole correlation, an executor
   * for its run that may still move (another participant may have answered
   * for it, with less). Returns who still did not answer, with the code of
   * the last failure: what only they hold may be missing from the replay.
   */
  async askUnreachedAgain (t: CorrTrack, since: number, deadline: number): Promise<Array<{ agent_id: string, code: string }>> {
    const failed = (agentId: string): boolean => (t.unreached.get(agentId)?.at ?? 0) >= since
    let again = false
    for (const p of vouchedParticipants(t)) {
      if (failed(p)) { this.syncCorrelationFrom(t, p); again = true }
    }
    for (const rt of t.runs.values()) {
      if (!rt.local && isLive(rt.state) && failed(rt.executor)) { this.fetch(t, rt); again = true }
    }
    if (again) await this.awaitSyncs(t, deadline, 1)
    return [...t.unreached].filter(([agentId]) => failed(agentId)).map(([agentId, u]) => ({ agent_id: agentId, code: u.code }))
  }

  /**
   * A participant joined the topic: a delegator that just started a run, or
   * a node that follows it. A run's first publish may have missed us (its
   * executor may not have known we subscribe yet) and the joiner may hold it.
   * Unless gossip brings any event of the correlation within
   * EVENTS_JOIN_SYNC_DELAY_MS, sync from the joiner. Waiting first spares it
   * one sync per subscriber when gossip did its job; if another run's event
   * hid a lost one, the tail sync still finds it.
   */
  joined (t: CorrTrack, agentId: string): void {
    const placed = t.placed
    // no run that may move is known, and a participant came: its work may begin now (an owner joins as it
    // delegates the task's next step), and the join sync may come before the joiner holds it; the tail's rounds
    // start over from their least delay and go on for a quiet watch (EVENTS_QUIET_WATCH_MS); one participant's joins
    // open one at most every EVENTS_JOIN_WATCH_EVERY_MS, so a peer joining again and again cannot keep them going
    if (!anyTailed(t) && this.mayOpenWatch(t, agentId)) {
      t.tailDelay = EVENTS_TAIL_SYNC_MIN_MS
      t.quietUntil = Date.now() + EVENTS_QUIET_WATCH_MS
      this.refresh(t)
    }
    const timer = setTimeout(() => {
      if (!t.closed && t.placed === placed) this.syncCorrelationFrom(t, agentId)
    }, EVENTS_JOIN_SYNC_DELAY_MS)
    timer.unref?.()
  }

  /** Whether `agentId`'s join may open a quiet watch now (EVENTS_JOIN_WATCH_EVERY_MS); notes it if so. */
  private mayOpenWatch (t: CorrTrack, agentId: string): boolean {
    const now = Date.now()
    const last = t.watchOpened.get(agentId)
    if (last !== undefined && now - last < EVENTS_JOIN_WATCH_EVERY_MS) return false
    // the map holds only joins within the window: bounded by the participants that joined in it
    for (const [p, at] of t.watchOpened) if (now - at >= EVENTS_JOIN_WATCH_EVERY_MS) t.watchOpened.delete(p)
    t.watchOpened.set(agentId, now)
    return true
  }

  /** Sync a whole correlation from one participant (coalesced: one in flight, one more if asked meanwhile). */
  syncCorrelationFrom (t: CorrTrack, agentId: string): void {
    if (t.closed || !this.target.running) return
    if (t.syncing.has(agentId)) {
      t.syncAgain.add(agentId)
      return
    }
    t.syncing.add(agentId)
    this.spawn(t, async () => {
      try {
        do {
          t.syncAgain.delete(agentId)
          try {
            this.stats.syncRequests.correlation++
            // each page placed as it comes: a peer's answer takes one page of memory here
            await this.slot(agentId, async () => this.client.correlation(peerIdOfAgent(agentId), t.id, {
              sink: async (events) => { if (!t.closed) await this.place(t, events) }
            }))
            t.unreached.delete(agentId)
          } catch (err) {
            if (err instanceof LockBusyError) {
              // no fault of the agent: its slot is given back, and it is asked again once the lock drains
              this.afterLock.armSync(t, agentId)
              t.syncAgain.delete(agentId)
            } else this.noteSyncError(t, err, 'correlation', agentId)
          }
        } while (t.syncAgain.has(agentId) && !t.closed)
      } finally {
        t.syncing.delete(agentId)
      }
    })
  }

  /**
   * Fetch a run's events after the head held here: from its executor, and
   * only when the executor cannot answer, from other participants. A run
   * known only from its executor's own word (startless: events past seq 1 on
   * gossip, nothing else) is asked of that executor alone: one gossip
   * message of a stranger that refuses its sync would otherwise cost a sync
   * with every participant. One that gossip brought (`startless`) is asked
   * of its executor only when no routing is needed to reach it, else of the
   * peer that relayed it, then of the executor if that one had nothing and
   * the executor is reached without routing by then (startless.ts). A round
   * made again asks by the relayer of the event that made it (nextAsk).
   */
  fetch (t: CorrTrack, rt: RunTrack, startless?: StartlessAsk): void {
    if (t.closed || rt.local || !this.target.running) {
      startless?.done()
      return
    }
    if (rt.fetching) {
      rt.fetchAgain = true
      const pending = this.nextAsk.get(rt)
      // one asked without a relayer's ask (someone vouched for the run) is not narrowed by a later one
      if (pending === null) startless?.done()
      else {
        pending?.done()
        this.nextAsk.set(rt, startless ?? null)
      }
      return
    }
    rt.fetching = true
    const stop = new AbortController()
    rt.fetchStop = stop
    // a run forgotten to make room is fetched no more (correlations.ts evictUnproven aborts `stop`)
    const gone = (): boolean => t.closed || stop.signal.aborted
    let ask = startless
    this.spawn(t, async () => {
      try {
        let again = false
        do {
          if (again) {
            // this round is the one an event that came meanwhile asked for: by its relayer, if it had one
            const next = this.nextAsk.get(rt)
            this.nextAsk.delete(rt)
            ask?.done()
            ask = next ?? undefined
          }
          again = true
          rt.fetchAgain = false
          await this.target.runTrack(t, rt.run_id)
          const cur = isStartless(rt) ? ask : undefined
          const via = cur === undefined ? undefined : await cur.source(rt.executor)
          const sources = !isStartless(rt)
            ? [rt.executor, ...[...t.participants].filter(p => p !== rt.executor)]
            : via === undefined || via === rt.executor ? [rt.executor] : [via, rt.executor]
          for (const source of sources) {
            if (gone()) return
            // the relayer had nothing: its executor next, only if no routing is needed to reach it
            if (source !== sources[0] && cur !== undefined && !(await cur.reachable(source))) break
            try {
              this.stats.syncRequests.run++
              let got = 0
              await this.slot(source, async () => gone()
                ? []
                : this.client.run(peerIdOfAgent(source), rt.run_id, rt.head, {
                  signal: stop.signal,
                  sink: async (events) => {
                    // only what placement took: events it refused (a verdict the delegator did not sign, a repeat)
                    // are no answer, and the next participant is asked
                    if (!gone()) got += await this.place(t, events)
                  }
                }))
              if (t.unreached.get(source)?.what === 'run') t.unreached.delete(source)
              if (got > 0 || source === rt.executor) break
            } catch (err) {
              if (err instanceof LockBusyError) {
                // no fault of the agent: the slot is given back, and the run fetched again once the lock drains (a
                // startless run by its relayer's ask again, within its share: no DHT walk then either)
                const retake = cur === undefined ? undefined : cur.again
                this.afterLock.arm(t, rt, retake)
                return
              }
              // let go on purpose (the run was evicted, the node stops): no fault of the agent asked
              if (stop.signal.aborted) {
                this.log.debug({ run_id: rt.run_id, agent_id: source }, 'a run fetch was stopped')
                return
              }
              this.noteSyncError(t, err, 'run', source, !isStartless(rt))
            }
          }
        } while (rt.fetchAgain && !gone())
      } finally {
        ask?.done()
        this.nextAsk.get(rt)?.done()
        this.nextAsk.delete(rt)
        rt.fetching = false
        if (rt.fetchStop === stop) rt.fetchStop = undefined
        this.target.settled(t)
      }
    })
  }

  /**
   * Re-arm the tail timer: while a run of the correlation may still move (or
   * none is known yet and someone is waiting), its tail is synced again after
   * a delay that doubles up to EVENTS_TAIL_SYNC_MAX_MS (each drawn within
   * EVENTS_TAIL_SYNC_JITTER of it; placement.ts says what resets it).
   */
  refresh (t: CorrTrack): void {
    if (t.closed || !this.target.running) return
    clearTimeout(t.tailTimer)
    t.tailTimer = undefined
    const live = anyTailed(t)
    const interested = isInterested(t)
    // the last run that could move ended: a run gossip lost meanwhile (a sub-delegation, a successor) is known to
    // no event this node holds, so the rounds go on a while to ask the participants (EVENTS_QUIET_WATCH_MS)
    if (t.wasLive && !live && interested) t.quietUntil = Date.now() + EVENTS_QUIET_WATCH_MS
    t.wasLive = live
    // a verdict its executor's own events may still replace keeps the participants asked past the quiet watch: a
    // subscriber that missed the replacement (cut off when it was gossiped) would show the run failed for good
    const watching = live || (interested && (t.runs.size === 0 || Date.now() < t.quietUntil))
    const verdictOnly = !watching && interested && verdictMayYield(t)
    if (!watching && !verdictOnly) return
    // only a standing verdict keeps the rounds: they slow further (EVENTS_VERDICT_SYNC_MAX_MS), and come back to the
    // usual bound once anything else does
    const maxDelay = verdictOnly ? EVENTS_VERDICT_SYNC_MAX_MS : EVENTS_TAIL_SYNC_MAX_MS
    t.tailDelay = Math.min(t.tailDelay, maxDelay)
    t.tailTimer = setTimeout(() => {
      t.tailDelay = Math.min(t.tailDelay * 2, maxDelay)
      // runs nobody told us about (a first publish that missed us, a sub-delegation) only show up
      // in a participant's log, so someone waiting on this correlation asks them too: in a round
      // where nothing came in. While events keep arriving the correlation is flowing, and a whole
      // correlation from every participant per round costs more than everything gossip carries
      const flowing = t.placed !== t.placedAtTail
      t.placedAtTail = t.placed
      if (!flowing && isInterested(t)) for (const p of vouchedParticipants(t)) this.syncCorrelationFrom(t, p)
      for (const rt of t.runs.values()) if (tailed(rt)) this.fetch(t, rt)
      this.refresh(t)
    }, t.tailDelay * (1 - EVENTS_TAIL_SYNC_JITTER + 2 * EVENTS_TAIL_SYNC_JITTER * Math.random()))
    t.tailTimer.unref?.()
  }
}

/** Whether a run of the correlation may still move (`tailed`); asked on every placed event, so no array is made for it. */
function anyTailed (t: CorrTrack): boolean {
  for (const rt of t.runs.values()) if (tailed(rt)) return true
  return false
}

/** A run whose last event here is its delegator's verdict, within LIVENESS_NOTICE_MAX_AGE_MS of it (protocols/liveness.md). */
function verdictMayYield (t: CorrTrack): boolean {
  const now = Date.now()
  for (const rt of t.runs.values()) {
    const h = rt.head
    if (h !== undefined && isVerdict(h) && now - Date.parse(h.at) < LIVENESS_NOTICE_MAX_AGE_MS) return true
  }
  return false
}

/** A run the tail's rounds fetch again: one that may still move, known by more than a stranger's word (isStartless), and not refused. */
function tailed (rt: RunTrack): boolean {
  // a run whose start was judged and refused, or that waits for its ancestor (fetched once that is
  // admitted), never gets a head here: its state stays 'unknown', and polling it would never end
  return !rt.local && isLive(rt.state) && !isStartless(rt) && rt.lineage !== 'rejected' && rt.lineage !== 'pending'
}
