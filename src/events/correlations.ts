/**
 * The correlations the events service follows and the runs it knows of in
 * each: when a correlation is tracked, joined on gossip, and let go, and
 * where each run's head stands. A correlation is untracked (its topic left)
 * once it has no live run this node has its own reason to follow, no
 * subscriber, no replay or fetch in progress and no delegation on its way in.
 */
import {
  EVENTS_MAX_PARTICIPANTS, EVENTS_MAX_RUNS_PER_CORRELATION, EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION, MAX_CORRELATION_TOPICS
} from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'
import { peerIdOfAgent } from '../identity/identity.ts'
import type { Logger } from '../logger.ts'
import { eventHash, executorOfRun, type SignatureCache } from '../runlog/event.ts'
import { handoffTarget } from '../runlog/handoff.ts'
import { endsRun, judgeRun, type LineageVerdict, type RunStanding } from '../runlog/lineage.ts'
import { ticketOf } from '../runlog/ticket.ts'
import type { AgentEvent } from '../runlog/types.ts'
import type { EventLog } from '../runlog/event-log.ts'
import { EVENTS_MAX_RUNS_PER_ROOT, EVENTS_ROOT_RUNS_RESERVED } from './constants.ts'
import type { CopyStore } from './copies.ts'
import { stateAfter } from './replay.ts'
import type { TopicMembership, TopicValidator } from './membership.ts'
import { isInterested, isLive, newCorrTrack, type CorrTrack, type EventsStats, type RunTrack } from './track.ts'

export interface CorrelationsInit {
  agentId: string
  log: EventLog
  copies: CopyStore
  topics: TopicMembership
  logger: Logger
  /** The gossip validator of a joined correlation's topic. */
  validator: (t: CorrTrack) => TopicValidator
  /** A participant was added to a correlation someone waits on. */
  onParticipant: (t: CorrTrack, agentId: string) => void
  /** A pending run waits for this ancestor, which is not admitted here yet: get its events. */
  onAncestorWanted: (t: CorrTrack, rt: RunTrack) => void
  /** A run read from the log was admitted: runs waiting on it can be judged again. */
  onSettled: (t: CorrTrack, runId: string) => void
  /** The node's verified-signature cache (src/runlog/event.ts), shared with no other node. */
  signatures: SignatureCache
  stats: EventsStats
}

export class Correlations {
  private readonly init: CorrelationsInit
  private readonly tracks = new Map<string, CorrTrack>()
  /** Joined topics and their tracks. */
  private readonly byTopic = new Map<string, CorrTrack>()

  constructor (init: CorrelationsInit) {
    this.init = init
  }

  /** The node's event log (local-events.ts reads this node's own runs back from it). */
  get log (): EventLog {
    return this.init.log
  }

  get (correlationId: string): CorrTrack | undefined {
    return this.tracks.get(correlationId)
  }

  byTopicName (topic: string): CorrTrack | undefined {
    return this.byTopic.get(topic)
  }

  all (): CorrTrack[] {
    return [...this.tracks.values()]
  }

  /**
   * The track of a correlation, created if needed. With `gossip`, the node
   * joins the topic (validator and score parameters first). At
   * MAX_CORRELATION_TOPICS an explicit subscriber takes the topic of an
   * automatically tracked correlation (`yieldTopic`), and gets a typed error
   * only when every joined topic has a subscriber or a caller of its own;
   * automatic tracking (executor, delegator) just stays off gossip.
   */
  ensure (correlationId: string, gossip: boolean, explicit: boolean): CorrTrack {
    let t = this.tracks.get(correlationId)
    if (t === undefined) {
      t = newCorrTrack(correlationId)
      this.tracks.set(correlationId, t)
    }
    if (gossip && !t.gossip) {
      if (this.init.topics.full && !(explicit && this.yieldTopic(t))) {
        if (explicit) {
          if (t.subs.size === 0 && t.holds === 0) this.maybeUntrack(t)
          throw new InvalidRequestError(`this node already follows ${MAX_CORRELATION_TOPICS} correlations`, { reason: 'topic_limit', max: MAX_CORRELATION_TOPICS })
        }
        return t
      }
      this.init.topics.join(t.topic, this.init.validator(t))
      t.gossip = true
      this.byTopic.set(t.topic, t)
    }
    return t
  }

  /**
   * Take the longest-tracked correlation that no subscriber, replay or
   * delegation in flight holds (one kept only by runs this node delegated,
   * say blocked ones) off gossip, so that an explicit subscriber gets its
   * topic. The correlation stays tracked: its live runs are fetched by the
   * tail sync (protocols/events.md, Tails) instead of coming by gossip. A
   * delegator with MAX_CORRELATION_TOPICS runs waiting on humans had refused
   * every new subscriber (an A2A task, an event stream) with `topic_limit`.
   */
  private yieldTopic (wanted: CorrTrack): boolean {
    for (const t of this.tracks.values()) {
      if (t === wanted || !t.gossip || t.subs.size > 0 || t.holds > 0 || t.pending > 0) continue
      t.gossip = false
      this.byTopic.delete(t.topic)
      this.init.topics.leave(t.topic, false)
      this.init.stats.topicsYielded++
      return true
    }
    return false
  }

  private keep (t: CorrTrack): boolean {
    if (t.subs.size > 0 || t.holds > 0 || t.pending > 0 || t.writing > 0) return true
    // a run whose copies could not be written is kept until its log is cut at the hole (runTrack)
    for (const rt of t.runs.values()) if ((rt.interest && isLive(rt.state)) || rt.cutUpTo !== undefined) return true
    return false
  }

  /**
   * A run this node delegated whose record ended with nothing of it held
   * here (liveness declared its executor lost, with no event to chain a
   * verdict to): nothing more is waited for. Before, the run kept its
   * correlation tracked, on gossip and its tail fetched from the gone
   * executor, for as long as the node ran. A subscriber, or another run,
   * may still keep it.
   */
  letGo (correlationId: string, runId: string): void {
    const t = this.tracks.get(correlationId)
    const rt = t?.runs.get(runId)
    if (t === undefined || rt === undefined || rt.head !== undefined) return
    rt.interest = false
    this.maybeUntrack(t)
  }

  maybeUntrack (t: CorrTrack): void {
    if (!t.closed && !this.keep(t)) this.untrack(t, false)
  }

  /** Let a correlation go; `now` leaves its topic at once (the service is stopping). */
  untrack (t: CorrTrack, now: boolean): void {
    t.closed = true
    clearTimeout(t.tailTimer)
    for (const rt of t.runs.values()) clearTimeout(rt.gapTimer)
    if (t.gossip) {
      t.gossip = false
      this.byTopic.delete(t.topic)
      this.init.topics.leave(t.topic, now)
    }
    if (this.tracks.get(t.id) === t) this.tracks.delete(t.id)
  }

  /**
   * The track of a run, made if the correlation has room. A new run is
   * unproven until its run.started is admitted; past
   * EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION unproven runs, refused ones are
   * forgotten first, then the oldest waiting ones this node has no interest
   * in (undefined when none can go).
   */
  newRunTrack (t: CorrTrack, runId: string, local: boolean): RunTrack | undefined {
    let rt = t.runs.get(runId)
    if (rt !== undefined) return rt
    if (t.unprovenRuns >= EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION && !this.evictUnproven(t)) return undefined
    const executor = executorOfRun(runId)
    const mine = local || executor === this.init.agentId
    rt = {
      run_id: runId,
      executor,
      local: mine,
      interest: mine,
      told: 0,
      headHash: undefined,
      // a run the log does not hold has nothing to load
      headLoaded: t.logRuns !== undefined && !t.logRuns.has(runId),
      state: 'unknown',
      fetching: false,
      fetchAgain: false,
      lineage: 'unknown'
    }
    t.runs.set(runId, rt)
    t.unprovenRuns++
    if (!rt.local) this.addParticipant(t, executor, true)
    return rt
  }

  /** The run's track with its head loaded from the log (once). */
  async runTrack (t: CorrTrack, runId: string): Promise<RunTrack | undefined> {
    const rt = this.newRunTrack(t, runId, false)
    if (rt === undefined) return rt
    if (!rt.headLoaded) {
      rt.headLoaded = true
      // callers that come while the head loads wait for the same load
      rt.loading = (async () => {
        await this.flushCopies()
        if (rt.cutUpTo !== undefined) {
          const upTo = rt.cutUpTo
          try {
            const hole = await this.init.log.cutAtGap(runId, upTo)
            rt.cutUpTo = undefined
            if (hole !== undefined) this.init.logger.warn({ run_id: runId, hole, up_to: upTo }, 'a failed copy write left a hole in a run\'s log: the events after it were dropped and are fetched again')
          } catch (err) {
            // the log cannot be trusted past its hole yet: loaded again on next use
            rt.headLoaded = false
            throw err
          }
        }
        const head = await this.init.log.head(runId)
        if (head !== undefined && (rt.head === undefined || head.seq > rt.head.seq)) {
          rt.head = head
          rt.headHash = undefined
          rt.state = stateAfter(head)
        }
      })().finally(() => { rt.loading = undefined })
    }
    if (rt.loading !== undefined) await rt.loading
    // a run the log holds was judged when it came in (or is this node's own): judge it again here
    if (rt.head !== undefined && rt.lineage === 'unknown') await this.judgeHeld(t, rt)
    return rt
  }

  /** Judge a run the log holds (a copy admitted before, or a run this node executes), its ancestors first. */
  private async judgeHeld (t: CorrTrack, rt: RunTrack): Promise<void> {
    const started = await this.init.log.get(rt.run_id, 1)
    if (started === undefined) return
    const ticket = ticketOf(started, this.init.agentId, this.init.signatures)
    const ancestor = ticket?.handoff_from?.run_id ?? ticket?.parent_run ?? undefined
    // ancestors are loaded first; the chain is at most MAX_HANDOFF_DEPTH plus the sub-delegations
    if (ancestor !== undefined && ancestor !== rt.run_id && t.runs.get(ancestor)?.lineage !== 'admitted') await this.runTrack(t, ancestor)
    if (rt.lineage === 'unknown' && this.judge(t, rt, started) === 'admitted') this.init.onSettled(t, rt.run_id)
  }

  // ---- lineage (src/runlog/lineage.ts) ------------------------------------------------------

  /** What the lineage judge knows of a run of this correlation. */
  private standing (t: CorrTrack, runId: string): RunStanding | undefined {
    const rt = t.runs.get(runId)
    if (rt === undefined || rt.lineage === 'unknown') return undefined
    const verdict: LineageVerdict = rt.lineage === 'admitted'
      ? { status: 'admitted', owner: rt.owner ?? '' }
      : rt.lineage === 'pending' ? { status: 'pending', waitingFor: rt.waitingFor ?? '' } : rejectedStanding(rt)
    const handoffTo = rt.head === undefined ? undefined : handoffTarget(rt.head)?.run_id
    return { ticket: rt.ticket, verdict, handoffTo, ended: endsRun(rt.head) }
  }

  /**
   * Judge a run on its run.started and record the outcome on its track:
   * `admitted` (to the track's owner's task; the first admitted root names
   * the owner when nothing else did), `pending` (its ancestor is not known
   * yet: the start is held and the ancestor looked for), `foreign` (admitted
   * to another owner's task) or `rejected` (it claims a place it cannot
   * prove). Admitted runs count against EVENTS_MAX_RUNS_PER_CORRELATION.
   */
  judge (t: CorrTrack, rt: RunTrack, started: AgentEvent): 'admitted' | 'pending' | 'foreign' | 'full' | 'rejected' | 'unnamed' {
    // a run id is looked up in the log whatever correlation asks: a run of another task (its executor's event
    // claiming this correlation, chained to its head) has no place here, whatever its ticket proves there
    if (started.correlation_id !== t.id) {
      rt.lineage = 'rejected'
      rt.heldStart = undefined
      rt.waitingFor = undefined
      this.init.logger.debug({ run_id: rt.run_id, correlation_id: t.id, started_in: started.correlation_id }, 'a run of another correlation was named in this one')
      return 'rejected'
    }
    // checked first as this node (a ticket it issued is not verified again), then judged on that
    rt.ticket = ticketOf(started, this.init.agentId, this.init.signatures)
    const v = judgeRun(started, id => this.standing(t, id), this.init.signatures)
    if (v.status === 'pending') {
      rt.lineage = 'pending'
      rt.heldStart = started
      rt.waitingFor = v.waitingFor
      this.lookForAncestor(t, v.waitingFor)
      return 'pending'
    }
    rt.heldStart = undefined
    rt.waitingFor = undefined
    if (v.status === 'rejected') {
      rt.lineage = 'rejected'
      this.init.logger.debug({ run_id: rt.run_id, correlation_id: t.id, reason: v.reason }, 'a run could not prove its place in the task')
      // under a run past the task's limits here (its ancestor's verdict carried on): past them too, no forgery
      if (v.reason === 'over_limit') {
        rt.overLimit = true
        return 'full'
      }
      if (v.reason !== 'not_named_by_predecessor') return 'rejected'
      rt.unnamed = true
      return 'unnamed'
    }
    t.owner ??= v.owner
    const root = this.rootOf(t, rt)
    if (v.owner !== t.owner || this.full(t, rt.run_id, root)) {
      rt.lineage = 'rejected'
      rt.owner = v.owner
      // the owner's run past the limit is not another owner's: its verdict says which, for each of its events
      if (v.owner !== t.owner) return 'foreign'
      rt.overLimit = true
      return 'full'
    }
    rt.lineage = 'admitted'
    rt.owner = v.owner
    rt.root = root
    if (root !== rt.run_id) t.underRoot.set(root, (t.underRoot.get(root) ?? 0) + 1)
    // its executor is no longer known only from its own word
    if (!rt.local) this.addParticipant(t, rt.executor)
    t.unprovenRuns--
    t.admittedRuns++
    return 'admitted'
  }

  /** The root run of an admitted run's line: its parent's or predecessor's root (that one is admitted already), or itself. */
  private rootOf (t: CorrTrack, rt: RunTrack): string {
    const ancestor = rt.ticket?.handoff_from?.run_id ?? rt.ticket?.parent_run ?? null
    if (ancestor === null) return rt.run_id
    return t.runs.get(ancestor)?.root ?? ancestor
  }

  /**
   * The task holds as many admitted runs as it takes: EVENTS_MAX_RUNS_PER_CORRELATION in all, of them
   * EVENTS_ROOT_RUNS_RESERVED for the owner's own delegations, and EVENTS_MAX_RUNS_PER_ROOT under one root, so the
   * executors of one delegation cannot lock the owner's next runs, nor the other delegations' lines, out.
   */
  private full (t: CorrTrack, runId: string, root: string): boolean {
    if (root === runId) return t.admittedRuns >= EVENTS_MAX_RUNS_PER_CORRELATION
    return t.admittedRuns >= EVENTS_MAX_RUNS_PER_CORRELATION - EVENTS_ROOT_RUNS_RESERVED || (t.underRoot.get(root) ?? 0) >= EVENTS_MAX_RUNS_PER_ROOT
  }

  /** Runs whose start waits for `runId` (its admission, or its handoff event). */
  waitingOn (t: CorrTrack, runId: string): RunTrack[] {
    return [...t.runs.values()].filter(rt => rt.lineage === 'pending' && rt.waitingFor === runId)
  }

  /** An ancestor a pending run waits for: from the log if it is held, else fetched. */
  private lookForAncestor (t: CorrTrack, runId: string): void {
    const rt = this.newRunTrack(t, runId, false)
    if (rt === undefined || rt.lineage === 'admitted') return
    // a run of this node's own needs its ancestor only to be delivered (a subscriber keeps the track for that); its
    // interest would keep a parent that never shows up tracked for good, one correlation per such delegation
    rt.interest ||= [...t.runs.values()].some(r => r.waitingFor === runId && r.interest && !r.local)
    this.init.onAncestorWanted(t, rt)
  }

  /**
   * Make room for an unproven run: forget a refused one, else the oldest
   * waiting one nobody here needs, else the oldest one whose start has not
   * come (events past seq 1 with no run.started: a flood of those would
   * otherwise lock every new run out), one not being fetched first. A fetch
   * of the one forgotten ends: a stranger whose sync never answers cannot
   * keep its runs here by keeping their fetches open.
   */
  private evictUnproven (t: CorrTrack): boolean {
    let victim: RunTrack | undefined
    let pending: RunTrack | undefined
    let startless: RunTrack | undefined
    let fetched: RunTrack | undefined
    for (const rt of t.runs.values()) {
      if (rt.local || rt.interest || rt.told > 0 || rt.lineage === 'admitted') continue
      if (rt.lineage === 'rejected') { victim = rt; break }
      if (rt.lineage === 'pending') pending ??= rt
      else if (rt.loading !== undefined) continue
      else if (!rt.fetching) startless ??= rt
      else fetched ??= rt
    }
    victim ??= pending ?? startless ?? fetched
    if (victim === undefined) return false
    victim.fetchStop?.abort(new Error('the run was forgotten to make room'))
    t.runs.delete(victim.run_id)
    t.unprovenRuns--
    clearTimeout(victim.gapTimer)
    victim.gapTimer = undefined
    for (const held of victim.early?.values() ?? []) {
      t.earlyCount--
      t.earlyBytes -= held.bytes
    }
    victim.early = undefined
    return true
  }

  /** Write pending copies before a read of the log; a failed write was logged and its heads reset. */
  async flushCopies (): Promise<void> {
    try {
      await this.init.copies.flush()
    } catch (err) {
      this.init.logger.debug({ err }, 'reading the log after a failed copy write')
    }
  }

  /** The hash the next event of the run must name as `prev` (null before seq 1). */
  headHashOf (rt: RunTrack): string | null {
    if (rt.head === undefined) return null
    rt.headHash ??= eventHash(rt.head)
    return rt.headHash
  }

  /**
   * An agent to sync the correlation with. `unproven`: only the executor of
   * a run not admitted yet names it (see CorrTrack.unprovenParticipants);
   * anyone else vouched for takes the place of such one when the set is full.
   */
  addParticipant (t: CorrTrack, agentId: string, unproven = false): void {
    if (agentId === this.init.agentId || agentId === '') return
    if (t.participants.has(agentId)) {
      if (!unproven && t.unprovenParticipants.delete(agentId) && isInterested(t)) this.init.onParticipant(t, agentId)
      return
    }
    try {
      peerIdOfAgent(agentId)
    } catch {
      // an event named something that is not an agent id: nobody to sync from
      return
    }
    if (t.participants.size >= EVENTS_MAX_PARTICIPANTS) {
      const stranger = unproven ? undefined : t.unprovenParticipants.values().next().value
      if (stranger === undefined) {
        this.init.stats.participantsRefused++
        return
      }
      t.unprovenParticipants.delete(stranger)
      t.participants.delete(stranger)
    }
    t.participants.add(agentId)
    if (unproven) {
      // its runs are fetched from it one by one; the whole correlation is asked of it once a run of it is admitted
      t.unprovenParticipants.add(agentId)
      return
    }
    // correlation-wide syncs are for someone waiting on this node (a subscriber, a replay);
    // an executor's or delegator's own tracking learns from its runs' events and fetches
    if (isInterested(t)) this.init.onParticipant(t, agentId)
  }
}

/**
 * What a run not in the task tells the lineage judge of the runs under it: its
 * real verdict (src/runlog/lineage.ts). A run of another owner's task is
 * admitted to that owner's, so the runs under it are foreign too; one past the
 * limits or not named by its predecessor hands its reason on (BLAMELESS_REASONS);
 * only a run that could not prove its place is rejected, and so are its own.
 */
function rejectedStanding (rt: RunTrack): LineageVerdict {
  if (rt.overLimit === true) return { status: 'rejected', reason: 'over_limit' }
  if (rt.unnamed === true) return { status: 'rejected', reason: 'not_named_by_predecessor' }
  if (rt.owner !== undefined) return { status: 'admitted', owner: rt.owner }
  return { status: 'rejected', reason: 'rejected' }
}
