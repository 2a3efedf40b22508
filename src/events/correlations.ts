/**
 * The correlations the events service follows and the runs it knows of in
 * each: when a correlation is tracked, joined on gossip, and let go, and
 * where each run's head stands. A correlation is untracked (its topic left)
 * once it has no live run this node has its own reason to follow, no
 * subscriber, no replay or fetch in progress and no delegation on its way in.
 */
import { EVENTS_MAX_PARTICIPANTS, EVENTS_MAX_RUNS_PER_CORRELATION, MAX_CORRELATION_TOPICS } from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'
import { peerIdOfAgent } from '../identity/identity.ts'
import type { Logger } from '../logger.ts'
import { eventHash, executorOfRun } from '../runlog/event.ts'
import type { EventLog } from '../runlog/event-log.ts'
import type { CopyStore } from './copies.ts'
import { stateAfter } from './replay.ts'
import type { TopicMembership, TopicValidator } from './membership.ts'
import { isInterested, isLive, newCorrTrack, type CorrTrack, type RunTrack } from './track.ts'

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
}

export class Correlations {
  private readonly init: CorrelationsInit
  private readonly tracks = new Map<string, CorrTrack>()
  /** Joined topics and their tracks. */
  private readonly byTopic = new Map<string, CorrTrack>()

  constructor (init: CorrelationsInit) {
    this.init = init
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
   * joins the topic (validator and score parameters first); an explicit
   * subscriber over MAX_CORRELATION_TOPICS gets a typed error, automatic
   * tracking (executor, delegator) just stays off gossip.
   */
  ensure (correlationId: string, gossip: boolean, explicit: boolean): CorrTrack {
    let t = this.tracks.get(correlationId)
    if (t === undefined) {
      t = newCorrTrack(correlationId)
      this.tracks.set(correlationId, t)
    }
    if (gossip && !t.gossip) {
      if (this.init.topics.full) {
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

  private keep (t: CorrTrack): boolean {
    if (t.subs.size > 0 || t.holds > 0 || t.pending > 0) return true
    for (const rt of t.runs.values()) if (rt.interest && isLive(rt.state)) return true
    return false
  }

  maybeUntrack (t: CorrTrack): void {
    if (!t.closed && !this.keep(t)) this.untrack(t, false)
  }

  /** Let a correlation go; `now` leaves its topic at once (the service is stopping). */
  untrack (t: CorrTrack, now: boolean): void {
    t.closed = true
    clearTimeout(t.tailTimer)
    if (t.gossip) {
      t.gossip = false
      this.byTopic.delete(t.topic)
      this.init.topics.leave(t.topic, now)
    }
    if (this.tracks.get(t.id) === t) this.tracks.delete(t.id)
  }

  /** The track of a run, made if the correlation has room (undefined past EVENTS_MAX_RUNS_PER_CORRELATION). */
  newRunTrack (t: CorrTrack, runId: string, local: boolean): RunTrack | undefined {
    let rt = t.runs.get(runId)
    if (rt !== undefined) return rt
    if (t.runs.size >= EVENTS_MAX_RUNS_PER_CORRELATION) return undefined
    const executor = executorOfRun(runId)
    const mine = local || executor === this.init.agentId
    rt = {
      run_id: runId,
      executor,
      local: mine,
      interest: mine,
      headHash: undefined,
      // a run the log does not hold has nothing to load
      headLoaded: t.logRuns !== undefined && !t.logRuns.has(runId),
      state: 'unknown',
      fetching: false,
      fetchAgain: false
    }
    t.runs.set(runId, rt)
    if (!rt.local) this.addParticipant(t, executor)
    return rt
  }

  /** The run's track with its head loaded from the log (once). */
  async runTrack (t: CorrTrack, runId: string): Promise<RunTrack | undefined> {
    const rt = this.newRunTrack(t, runId, false)
    if (rt === undefined || rt.headLoaded) return rt
    rt.headLoaded = true
    await this.flushCopies()
    const head = await this.init.log.head(runId)
    if (head !== undefined && (rt.head === undefined || head.seq > rt.head.seq)) {
      rt.head = head
      rt.headHash = undefined
      rt.state = stateAfter(head)
    }
    return rt
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

  addParticipant (t: CorrTrack, agentId: string): void {
    if (agentId === this.init.agentId || agentId === '' || t.participants.has(agentId)) return
    if (t.participants.size >= EVENTS_MAX_PARTICIPANTS) return
    try {
      peerIdOfAgent(agentId)
    } catch {
      // an event named something that is not an agent id: nobody to sync from
      return
    }
    t.participants.add(agentId)
    // correlation-wide syncs are for someone waiting on this node (a subscriber, a replay);
    // an executor's or delegator's own tracking learns from its runs' events and fetches
    if (isInterested(t)) this.init.onParticipant(t, agentId)
  }
}
