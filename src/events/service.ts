/**
 * The events service of a node: correlated run events over gossip, backed by
 * the durable signed log and the /aap/events/0.1.0 sync protocol. This file
 * is its facade (subscribe, replay, fetch, follow); the work is done by:
 *
 * - placement.ts: the executor publishes every committed event on its
 *   correlation's topic (gossip is the fast path; the log is the truth), and
 *   every node on the topic judges each message: Accept only an event that
 *   fits the schema, is signed by the executor named in its run id and
 *   extends the run's chain as held here; Reject forgeries (counted against
 *   the sender by gossipsub's peer score); Ignore duplicates and events that
 *   cannot be placed yet, which are fetched over sync instead.
 * - copies.ts: accepted events are stored, so every holder serves sync.
 * - syncer.ts: a tracked correlation keeps learning: participants named by
 *   events are synced from, runs named by handoffs are fetched from their
 *   executors, and while a run is live its tail is re-synced with a backoff.
 * - tracks.ts and topics.ts: which correlations are followed, and on gossip;
 *   at most MAX_CORRELATION_TOPICS topics.
 */
import type { PrivateKey } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'
import { SYNC_TIMEOUT_MS } from '../constants.ts'
import { AapError, InvalidRequestError } from '../errors.ts'
import { REPLAY_MAX_BYTES } from './constants.ts'
import { readCorrelation } from './read-correlation.ts'
import { agentIdOf, peerIdOfAgent } from '../identity/identity.ts'
import { componentLogger, type Logger } from '../logger.ts'
import { executorOfRun, SignatureCache } from '../runlog/event.ts'
import { EventLog } from '../runlog/event-log.ts'
import type { AgentEvent, Run } from '../runlog/types.ts'
import { groupCommitter } from '../storage/group-commit.ts'
import type { MeshHost } from '../wire/host.ts'
import { CopyStore } from './copies.ts'
import { Placement } from './placement.ts'
import type { LocalRuns } from './ports.ts'
import type { CorrelationReplay } from './replay.ts'
import { collectReplay } from './replay-collect.ts'
import { Forks, type RunFork } from './forks.ts'
import { deliverHeld } from './held-delivery.ts'
import { CatchUp } from './catch-up.ts'
import { placeSynced, readLocked } from './lock-queues.ts'
import { EventSubscription, type SubscribeOptions } from './subscription.ts'
import { SyncClient, serveSync, type SyncCallOptions } from './sync.ts'
import { Syncer } from './syncer.ts'
import { correlationTopic, isCorrelationId } from './topic.ts'
import { TopicMembership } from './membership.ts'
import { isInterested, isLive, newStats, vouchedParticipants, type CorrTrack, type EventsStats, type RunTrack } from './track.ts'
import { Correlations } from './correlations.ts'
import { addHints, checkHints, untell } from './hints.ts'
import { reconcileVerdict, type VerdictOutcome } from './verdicts.ts'

export { gossipScore } from './membership.ts'
export type { EventsStats, Verdict } from './track.ts'

export interface EventsInit {
  host: MeshHost
  privateKey: PrivateKey
  datastore: Datastore
  runs: LocalRuns
  /** The node's logger (this service logs as component `events`). */
  logger?: Logger
  /** The node's verified-signature cache (default: one of this service's own). */
  signatures?: SignatureCache
  /** Told of each run found forked (forks.ts). */
  onFork?: (fork: RunFork) => void
}

export interface ReplayOptions {
  /** The agent whose task this is (its root delegator); learnt from the runs when they agree on one. */
  owner?: string
  participants?: string[]
  runs?: string[]
  /** The whole collection (default REPLAY_TIMEOUT_MS); what is held by then is replayed. */
  timeoutMs?: number
  /** The caller went away: the collection ends at once (INVALID_REQUEST `cancelled`, or the signal's own AapError). */
  signal?: AbortSignal
}

export interface FetchOptions extends SyncCallOptions {
  /** The agent to ask (default: the run's executor). */
  from?: string
}

export interface FollowOptions {
  /** The caller joined the topic with prepare() before the run started: gossip brings its events, no fetch now. */
  prepared?: boolean
  /**
   * The handle was just returned by a delegation that created the run (no
   * idempotency key, so not an earlier run returned again): nothing of it can
   * be in the log unless this node has already placed some of it.
   */
  fresh?: boolean
}

export class Events {
  readonly agentId: string
  readonly log: EventLog
  readonly stats: EventsStats
  private readonly host: MeshHost
  private readonly runs: LocalRuns
  private readonly logger: Logger
  private readonly sync: SyncClient
  private readonly signatures: SignatureCache
  private readonly topicMembership: TopicMembership
  private readonly copies: CopyStore
  private readonly correlations: Correlations
  private readonly placement: Placement
  /** Forked runs found here (forks.ts). */
  readonly forks: Forks
  private readonly syncer: Syncer
  private unserve?: () => Promise<void>
  private offRuns?: () => void
  private started = false

  constructor (init: EventsInit) {
    this.host = init.host
    this.runs = init.runs
    this.agentId = agentIdOf(init.privateKey)
    this.logger = componentLogger(init.logger, 'events')
    this.log = new EventLog(init.datastore)
    this.stats = newStats()
    const signatures = init.signatures ?? new SignatureCache()
    this.signatures = signatures
    this.sync = new SyncClient(init.host, signatures, this.logger)
    this.copies = new CopyStore(groupCommitter(init.datastore), init.runs, this.stats, this.logger, {
      refetch: (t, rt) => { this.syncer.fetch(t, rt) },
      settled: (t) => { this.correlations.maybeUntrack(t) }
    })
    this.topicMembership = new TopicMembership(init.host, this.logger, () => { this.placement.count('untracked') })
    this.correlations = new Correlations({
      agentId: this.agentId,
      log: this.log,
      copies: this.copies,
      topics: this.topicMembership,
      logger: this.logger,
      validator: (t) => this.placement.validator(t),
      onParticipant: (t, agentId) => { this.syncer.syncCorrelationFrom(t, agentId) },
      onAncestorWanted: (t, rt) => { this.wantAncestor(t, rt.run_id) },
      onSettled: (t, runId) => { this.placement.settled(t, runId) },
      signatures,
      stats: this.stats
    })
    this.forks = new Forks({ log: this.logger, republish: (t, e) => { this.placement.republish(t, [e]) }, ...(init.onFork === undefined ? {} : { onFork: init.onFork }) })
    this.placement = new Placement({
      agentId: this.agentId,
      host: init.host,
      correlations: this.correlations,
      copies: this.copies,
      syncer: () => this.syncer,
      stats: this.stats,
      log: this.logger,
      running: () => this.started,
      deliverHeld: (t, rt) => { deliverHeld(t, rt, this.log, this.logger) },
      signatures,
      forked: (t, held, e) => this.forks.seen(t, held, e)
    })
    const service = this
    this.syncer = new Syncer(this.sync, {
      get running () { return service.started },
      ingest: async (t, events) => this.placement.ingest(t, events),
      runTrack: async (t, runId) => this.correlations.runTrack(t, runId),
      settled: (t) => { this.correlations.maybeUntrack(t) }
    }, this.stats, this.logger)
    // registered now so events committed while the node starts (restart recovery) are not missed
    this.offRuns = this.runs.onEvent((event, run) => { this.placement.onLocalEvent(event, run) })
  }

  async start (): Promise<void> {
    if (this.started) return
    this.unserve = await serveSync(this.host, this.log, async () => { await this.correlations.flushCopies() }, this.logger)
    this.topicMembership.start((topic, peer) => {
      const t = this.correlations.byTopicName(topic)
      if (t !== undefined && t.participants.has(peer) && !t.unprovenParticipants.has(peer) && isInterested(t)) this.syncer.joined(t, peer)
    })
    this.started = true
    // pick up what was live before a restart: runs this node executes or delegated
    for await (const run of this.runs.executing()) if (isLive(run.state)) this.trackLocalRun(run)
    for await (const run of this.runs.delegated()) if (isLive(run.state)) this.follow(run)
  }

  async stop (): Promise<void> {
    if (!this.started) return
    this.started = false
    this.offRuns?.()
    for (const t of this.correlations.all()) {
      for (const s of [...t.subs]) s.close()
      this.correlations.untrack(t, true)
    }
    this.topicMembership.stop()
    await this.correlations.flushCopies()
    await this.unserve?.()
    this.sync.close()
  }
  // ---- public API ------------------------------------------------------------------------

  /**
   * Follow a correlation: verified events, each run's in seq order, each once,
   * from the beginning (unless `history: false`) and then live. Resolves once
   * the node is on the topic, has handed over what it holds, and has made a
   * first round of dials and syncs to the participants it knows. Close the
   * subscription (or abort `signal`) to stop.
   *
   * INVALID_REQUEST for a bad correlation id or participant, or when the node
   * already follows MAX_CORRELATION_TOPICS correlations (details.reason
   * 'topic_limit'); TIMEOUT (reason 'correlation_busy') when its lock stays too far behind for
   * EVENTS_SUBSCRIBE_BUSY_WAIT_MS (lock-queues.ts): until then the subscription waits aside for it.
   */
  async subscribe (correlationId: string, opts: SubscribeOptions = {}): Promise<EventSubscription> {
    this.assertStarted()
    correlationTopic(correlationId)
    const hints = checkHints(opts)
    // a bad or conflicting owner is refused before the correlation is tracked (or takes a topic)
    this.claimOwner(this.correlations.get(correlationId), opts.owner)
    const t = this.correlations.ensure(correlationId, true, true)
    this.claimOwner(t, opts.owner)
    let told: RunTrack[] = []
    const sub = new EventSubscription(correlationId, opts, (s) => {
      t.subs.delete(s)
      untell(told)
      this.correlations.maybeUntrack(t)
    })
    if (sub.closed) {
      this.correlations.maybeUntrack(t)
      return sub
    }
    t.holds++
    try {
      const known = vouchedParticipants(t)
      told = addHints(this.correlations, this.syncer, t, hints)
      for (const p of known) this.syncer.syncCorrelationFrom(t, p)
      // history from the log, and the subscriber joins live delivery in the same
      // locked step: events are placed on this lock or while it is idle, and stored
      // before any later task on it runs, so none falls between
      // an iterator reads its history at its own pace, from the log (catch-up.ts)
      const pull = opts.history !== false && opts.onEvent === undefined
      await readLocked(t, this.stats, { gone: () => sub.closed, signal: opts.signal }, async () => {
        await this.correlations.flushCopies()
        const held = (await this.log.runsOf(correlationId)).sort()
        // from now on a run missing from this list has nothing in the log to look up
        t.logRuns ??= new Set(held)
        if (pull) sub.readFrom(new CatchUp(t, { log: this.log, correlations: this.correlations, stats: this.stats }))
        for (const runId of pull ? [] : held) {
          const rt = await this.correlations.runTrack(t, runId)
          // only runs admitted to the owner's task are handed over (protocols/lineage.md)
          if (rt?.lineage !== 'admitted') continue
          if (opts.history === false) {
            sub.startAfter(runId, rt.head?.seq ?? 0)
            continue
          }
          for await (const page of this.log.readAll(runId)) for (const e of page) sub.deliver(e)
        }
        if (!sub.closed && !t.closed) t.subs.add(sub)
      })
      this.syncer.refresh(t)
      await this.syncer.awaitSyncs(t, Date.now() + SYNC_TIMEOUT_MS, 1)
    } catch (err) {
      // nobody will hold a subscription that failed to start: it ends here (its listener on the caller's signal too)
      sub.close()
      throw err
    } finally {
      t.holds--
      // a subscription closed meanwhile (its signal aborted) no longer keeps the topic
      this.correlations.maybeUntrack(t)
    }
    if (t.closed) sub.close()
    return sub
  }

  /**
   * The whole lifecycle of a correlation, every run in lineage order, from
   * what this node holds plus what it can sync from the participants it knows
   * or is told about (and, transitively, those the events name).
   */
  async replay (correlationId: string, opts: ReplayOptions = {}): Promise<CorrelationReplay> {
    this.assertStarted()
    correlationTopic(correlationId)
    const deps = { self: this.agentId, correlations: this.correlations, syncer: this.syncer, signatures: this.signatures, forks: this.forks, read: async (id: string) => this.readCorrelation(id), claimOwner: (t: CorrTrack, owner: string | undefined) => { this.claimOwner(t, owner) } }
    return collectReplay(deps, correlationId, checkHints(opts), opts)
  }

  /**
   * Publish another node's verified event on its correlation's topic: a
   * handoff receiver spreads the event that confirmed its run, so a holder of
   * another handoff of the same run learns of the fork (forks.ts).
   */
  spread (e: AgentEvent): void {
    if (!this.started) return
    const t = this.correlations.ensure(e.correlation_id, false, false)
    this.placement.republish(t, [e])
    this.correlations.maybeUntrack(t)
  }

  /** The last event of a run this node holds (its log, or a copy), if any. */
  async lastEvent (runId: string): Promise<AgentEvent | undefined> {
    await this.correlations.flushCopies()
    return this.log.head(runId)
  }

  /**
   * A liveness verdict this node signed as the run's delegator
   * (src/runs/liveness.ts): stored, delivered to the run's subscribers and
   * published on the correlation's topic (protocols/liveness.md).
   */
  async placeVerdict (verdict: AgentEvent): Promise<void> {
    this.assertStarted()
    await this.holding(verdict.correlation_id, async (t) => {
      const placed = await this.placement.placeVerdict(t, verdict)
      if (!placed) this.logger.warn({ run_id: verdict.run_id, seq: verdict.seq }, 'a verdict did not extend the run\'s log as held here (a later event of the run arrived first)')
    })
  }

  /**
   * A verdict this node signed, settled against its executor's log once the
   * executor is heard from (verdicts.ts): the executor's own events from the
   * verdict's seq on replace it here.
   */
  async reconcileVerdict (verdict: AgentEvent, signal?: AbortSignal): Promise<VerdictOutcome> {
    this.assertStarted()
    return this.holding(verdict.correlation_id, async (t) => reconcileVerdict({ log: this.log, sync: this.sync, placement: this.placement, runs: this.runs, logger: this.logger, slot: async (a, fn) => this.syncer.slot(a, fn) }, t, verdict, signal))
  }

  /** Every event this node holds for a correlation (read-correlation.ts; REPLAY_MAX_BYTES at most). */
  async readCorrelation (correlationId: string, maxBytes = REPLAY_MAX_BYTES): Promise<Map<string, AgentEvent[]>> {
    await this.correlations.flushCopies()
    return readCorrelation(this.log, correlationId, maxBytes)
  }

  /**
   * Sync one run from one peer (default: its executor) into the log. Returns
   * the events that were new here. Throws a typed error when the peer lies
   * (INVALID_SIGNATURE, INVALID_REQUEST), stalls (TIMEOUT) or cannot be reached (AGENT_NOT_FOUND), and
   * TIMEOUT (reason 'correlation_busy') while the task's lock is too far behind; nothing it sent is kept then.
   */
  async fetchRun (runId: string, opts: FetchOptions = {}): Promise<AgentEvent[]> {
    this.assertStarted()
    const from = opts.from ?? executorOfRun(runId)
    const peer = peerIdOfAgent(from)
    await this.correlations.flushCopies()
    const head = await this.log.head(runId)
    const events = await this.syncer.slot(from, async () => this.sync.run(peer, runId, head, opts))
    const first = events[0]
    if (first === undefined) return []
    return this.holding(first.correlation_id, async (t) => placeSynced(t, this.stats, async () => this.placement.ingest(t, events)))
  }

  /**
   * The event at `seq` of a run as its executor's log holds it, verified and
   * not placed here (a handoff receiver asking for the event that names its
   * run: one page, however long the run). Undefined when the log has none
   * there; the sync's typed error when the executor cannot give it.
   */
  async eventFrom (runId: string, seq: number): Promise<AgentEvent | undefined> {
    const executor = executorOfRun(runId)
    return this.syncer.slot(executor, async () => this.sync.eventAt(peerIdOfAgent(executor), runId, seq))
  }

  /** Sync every run of a correlation `from` a peer into the log; same errors as fetchRun. */
  async fetchCorrelation (correlationId: string, opts: FetchOptions & { from: string }): Promise<AgentEvent[]> {
    this.assertStarted()
    correlationTopic(correlationId)
    const peer = peerIdOfAgent(opts.from)
    const byRun = await this.syncer.slot(opts.from, async () => this.sync.correlation(peer, correlationId, opts))
    return this.holding(correlationId, async (t) => {
      const out: AgentEvent[] = []
      for (const events of byRun.values()) out.push(...await placeSynced(t, this.stats, async () => this.placement.ingest(t, events)))
      return out
    })
  }

  /** Run `fn` with the correlation's track held (kept while it runs, let go after unless something else keeps it). */
  private async holding<T> (correlationId: string, fn: (t: CorrTrack) => Promise<T>): Promise<T> {
    const t = this.correlations.ensure(correlationId, false, false)
    t.holds++
    try {
      return await fn(t)
    } finally {
      t.holds--
      this.correlations.maybeUntrack(t)
    }
  }

  /**
   * Join a correlation's topic before delegating into it. The SUBSCRIBE leaves
   * ahead of the delegate request on the same connection, so the executor
   * counts this node among the topic's subscribers when it publishes
   * run.started, and gossip brings it: follow() then need not fetch. Call the
   * returned function once the delegation returned (`true`) or failed.
   * `root`: the delegation starts the task (no parent run), so the task is
   * this node's from now on; a root run.started another agent publishes
   * meanwhile cannot make the task its own. A claim whose delegation failed
   * is taken back while this node has delegated nothing else into the task.
   */
  prepare (correlationId: string, root = false): (delegated?: boolean) => void {
    if (!this.started || !isCorrelationId(correlationId)) return () => {}
    const t = this.correlations.ensure(correlationId, true, false)
    const claimed = root && t.owner === undefined
    if (claimed) [t.owner, t.ownerNamed] = [this.agentId, true]
    t.pending++
    let released = false
    return (delegated = false) => {
      if (released) return
      released = true
      t.pending--
      if (claimed && !delegated && t.pending === 0 && t.delegated.size === 0 && t.owner === this.agentId) [t.owner, t.ownerNamed] = [undefined, false]
      this.correlations.maybeUntrack(t)
    }
  }

  /**
   * Follow a run this node delegated (called when delegate or handoff returns
   * its handle): join its correlation and fetch its events from the executor.
   */

  follow (run: Run, opts: FollowOptions = {}): void {
    if (!this.started) return
    const t = this.correlations.ensure(run.correlation_id, true, false)
    const seen = t.runs.has(run.run_id)
    const rt = this.correlations.newRunTrack(t, run.run_id, false)
    if (rt !== undefined) {
      rt.interest = true
      // a run its executor has just created: the log cannot hold any of it unless this node
      // placed some already, which would have made the track, so the gossip copy of
      // run.started is placed at once instead of behind a log lookup
      if (opts.fresh === true && !seen && !rt.local) rt.headLoaded = true
      if (rt.state === 'unknown' && !isLive(run.state)) rt.state = run.state
    }
    if (run.delegator === this.agentId) {
      t.delegated.add(run.run_id)
      // a root run this node delegated: the task is its own
      if (run.parent_run === null && run.handoff_from === null && (t.owner ?? this.agentId) === this.agentId) [t.owner, t.ownerNamed] = [this.agentId, true]
    }
    this.correlations.addParticipant(t, run.agent_id)
    this.correlations.addParticipant(t, run.delegator)
    // prepared: gossip should have brought (or will bring) the events; the tail sync
    // fetches them if it did not, so a delegation costs no sync in the usual case
    if (rt !== undefined && opts.prepared !== true) this.syncer.fetch(t, rt)
    this.syncer.refresh(t)
  }

  /** A run this node delegated whose record ended with nothing of it held here: it no longer keeps its correlation (correlations.ts). */
  unfollow (run: Pick<Run, 'run_id' | 'correlation_id'>): void {
    if (this.started) this.correlations.letGo(run.correlation_id, run.run_id)
  }

  /** Correlations this node follows on gossip. */
  topics (): string[] {
    return this.correlations.all().filter(t => t.gossip).map(t => t.id)
  }

  /** Agents this node dials and syncs from for a correlation. */
  participants (correlationId: string): string[] {
    return [...(this.correlations.get(correlationId)?.participants ?? [])]
  }

  // ---- helpers ------------------------------------------------------------------------------

  /** A pending run waits for this ancestor: from the log if this node holds it, else from its executor. */
  private wantAncestor (t: CorrTrack, runId: string): void {
    this.correlations.runTrack(t, runId).then((rt) => {
      if (rt !== undefined && rt.lineage !== 'admitted' && !rt.local) this.syncer.fetch(t, rt)
    }, (err: unknown) => {
      this.logger.warn({ err, correlation_id: t.id, run_id: runId }, 'an ancestor run could not be read from the log')
    })
  }

  /** Take the owner a caller names (typed error when following another owner's task under it); a participant. Without a track: only checks it. */
  private claimOwner (t: CorrTrack | undefined, owner: string | undefined): void {
    if (owner === undefined) return
    peerIdOfAgent(owner)
    if (t === undefined) return
    if (t.owner !== undefined && t.owner !== owner) {
      throw new InvalidRequestError(`this node follows ${t.id} as the task of ${t.owner}, not of ${owner}`, { reason: 'owner_conflict', owner: t.owner })
    }
    [t.owner, t.ownerNamed] = [owner, true]
    // the owner holds its task's runs: a caller that names only it still has someone to sync from (protocols/events.md)
    this.correlations.addParticipant(t, owner)
  }

  private assertStarted (): void {
    if (!this.started) throw new AapError('INTERNAL', 'the events service is not started')
  }

  /** A run this node executes that was live before a restart. */
  private trackLocalRun (run: Run): void {
    const t = this.correlations.ensure(run.correlation_id, false, false)
    const rt = this.correlations.newRunTrack(t, run.run_id, true)
    if (rt !== undefined) rt.state = run.state
    this.correlations.addParticipant(t, run.delegator)
  }
}
