/**
 * The events service of a node: correlated run events over gossip, backed by
 * the durable signed log and the /aap/events/0.1.0 sync protocol.
 *
 * - The executor publishes every committed event (Runs.onEvent) on its
 *   correlation's topic. Gossip is the fast path; the log is the truth.
 * - Every node on a correlation topic judges each message with a topic
 *   validator: Accept only an event that fits the schema, is signed by the
 *   executor named in its run id and extends the run's chain as held here;
 *   Reject forgeries (counted against the sender by gossipsub's peer score);
 *   Ignore duplicates and events that cannot be placed yet (a gap, a run
 *   never seen), which are fetched over sync instead.
 * - Accepted events are stored, so every holder serves sync, and handed to
 *   local subscribers in per-run seq order.
 * - A tracked correlation keeps learning: participants named by events are
 *   dialed and synced from, runs named by handoffs are fetched from their
 *   executors, and while a run is running or blocked its tail is re-synced
 *   with a backoff, so a lost gossip message (the first on a fresh topic, the
 *   last of a run) is found without waiting for the next event.
 * - A correlation is untracked (topic left) once it has no running or
 *   blocked run and no subscriber. At most MAX_CORRELATION_TOPICS topics.
 */
import type { PeerId, PrivateKey } from '@libp2p/interface'
import { TopicValidatorResult, type Message, type SubscriptionChangeData } from '@libp2p/gossipsub'
import { PeerScore, createTopicScoreParams } from '@libp2p/gossipsub/score'
import type { Datastore } from 'interface-datastore'
import {
  EVENTS_MAX_EVENTS_PER_RUN, EVENTS_MAX_PARTICIPANTS, EVENTS_MAX_RUNS_PER_CORRELATION, EVENTS_SCORE_INVALID_DECAY,
  EVENTS_COPY_FLUSH_MS, EVENTS_COPY_MAX_PENDING, EVENTS_TOPIC_LINGER_MS, EVENTS_JOIN_SYNC_DELAY_MS, EVENTS_SCORE_INVALID_WEIGHT, EVENTS_TAIL_SYNC_MAX_MS, EVENTS_TAIL_SYNC_MIN_MS, EVENT_MAX_BYTES, MAX_CORRELATION_TOPICS,
  REPLAY_MAX_ROUNDS, REPLAY_TIMEOUT_MS, SYNC_CONCURRENCY, SYNC_MAX_EVENTS_PER_RESPONSE, SYNC_TIMEOUT_MS
} from '../constants.ts'
import { AapError, InvalidRequestError, toAapError } from '../errors.ts'
import { agentIdOf, peerIdOfAgent } from '../identity/identity.ts'
import type { AgentEvent, Run, RunState } from '../runlog/types.ts'
import type { LocalRuns } from './ports.ts'
import type { MeshHost } from '../wire/host.ts'
import { EventLog } from '../runlog/event-log.ts'
import { checkChain, eventHash, executorOfRun, verifyEventSync } from '../runlog/event.ts'
import { buildReplay, linkedRunsOf, participantsOf, stateAfter, type CorrelationReplay } from './replay.ts'
import { EventSubscription, type SubscribeOptions } from './subscription.ts'
import { SyncClient, serveSync, type SyncCallOptions } from './sync.ts'
import { correlationTopic, isCorrelationId } from './topic.ts'

export interface EventsInit {
  host: MeshHost
  privateKey: PrivateKey
  datastore: Datastore
  runs: LocalRuns
}

export interface ReplayOptions {
  participants?: string[]
  runs?: string[]
  /** The whole collection (default REPLAY_TIMEOUT_MS); what is held by then is replayed. */
  timeoutMs?: number
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

/** Why an event was or was not taken; counted in `stats`. */
export type Verdict =
  | 'accepted' | 'duplicate' | 'gap' | 'unknown_run' | 'own_run' | 'over_limit' | 'untracked'
  | 'conflict' | 'undecodable' | 'invalid' | 'wrong_correlation'

const VERDICT_RESULT: Record<Verdict, TopicValidatorResult> = {
  accepted: TopicValidatorResult.Accept,
  duplicate: TopicValidatorResult.Ignore,
  gap: TopicValidatorResult.Ignore,
  unknown_run: TopicValidatorResult.Ignore,
  own_run: TopicValidatorResult.Ignore,
  over_limit: TopicValidatorResult.Ignore,
  untracked: TopicValidatorResult.Ignore,
  conflict: TopicValidatorResult.Reject,
  undecodable: TopicValidatorResult.Reject,
  invalid: TopicValidatorResult.Reject,
  wrong_correlation: TopicValidatorResult.Reject
}

export interface EventsStats {
  /** Gossip messages by verdict. */
  gossip: Record<Verdict, number>
  /** Events taken from sync responses (after verification). */
  synced: number
  /** Failed syncs by error code. */
  syncErrors: Record<string, number>
  published: number
}

type RunTrackState = RunState | 'unknown'

interface RunTrack {
  run_id: string
  executor: string
  local: boolean
  /**
   * A run this node has its own reason to follow: it executes it, delegated
   * it, was told about it, or it continues such a run after a handoff. Only
   * these keep an automatically tracked correlation on gossip, so a stranger
   * announcing runs of its own cannot keep a node on a topic.
   */
  interest: boolean
  /** Last event of the contiguous log held here (from seq 1). */
  head?: AgentEvent
  /**
   * eventHash(head), computed when the next event's `prev` is checked, not
   * when the head moves: the last event of a run is never hashed, and runs
   * this node executes (which take no gossip) never are.
   */
  headHash: string | undefined
  headLoaded: boolean
  state: RunTrackState
  fetching: boolean
  fetchAgain: boolean
}

interface CorrTrack {
  id: string
  topic: string
  runs: Map<string, RunTrack>
  participants: Set<string>
  discovering: Set<string>
  discoverAgain: Set<string>
  subs: Set<EventSubscription>
  /** Runs this node delegated: their verified events go to the delegator's records (LocalRuns.delegatedEvents). */
  delegated: Set<string>
  gossip: boolean
  /** Events placed so far: tells a participant's join sync whether gossip already delivered. */
  placed: number
  /** `placed` when the tail timer last fired: events came in since, so the correlation is flowing. */
  placedAtTail: number
  holds: number
  /** Delegations into this correlation in flight (see prepare): keep the topic, ask nobody. */
  pending: number
  /**
   * Every change to the runs' heads and every write to the log of this
   * correlation happens in order: inside a task on `lock`, or synchronously
   * when no task is queued (`busy` is 0), so a gossip event that can be placed
   * at once does not give up its turn in the event loop.
   */
  lock: Promise<unknown>
  busy: number
  /**
   * Runs the log holds for this correlation, once a subscriber has listed them
   * (listing is a scan on the memory datastore, so only subscribers pay it):
   * spares a log lookup, and so a queued placement, per new run.
   */
  logRuns?: Set<string>
  inflight: Set<Promise<unknown>>
  tailTimer?: ReturnType<typeof setTimeout>
  tailDelay: number
  closed: boolean
}

const enc = new TextEncoder()
const dec = new TextDecoder('utf-8', { fatal: true })

function isLive (s: RunTrackState): boolean {
  return s === 'running' || s === 'blocked' || s === 'unknown'
}

/** A small counting semaphore: at most `n` syncs (dials included) at once. */
class Limiter {
  private active = 0
  private readonly waiting: Array<() => void> = []
  private readonly n: number

  constructor (n: number) {
    this.n = n
  }

  async run<T> (fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.n) await new Promise<void>(resolve => { this.waiting.push(resolve) })
    this.active++
    try {
      return await fn()
    } finally {
      this.active--
      this.waiting.shift()?.()
    }
  }
}

/**
 * gossipsub counts rejected messages against the sender (P4) only on topics
 * with score parameters. Topics come and go with correlations, so their
 * parameters are added to the running router's score when a topic is joined
 * and removed when it is left. The router's `score` is not part of the
 * GossipSub interface; the instanceof check keeps this honest, and without it
 * the validator still works, only without the score penalty.
 */
function peerScoreOf (host: MeshHost): PeerScore | undefined {
  const pubsub: object = host.services.pubsub
  const score: unknown = 'score' in pubsub ? pubsub.score : undefined
  return score instanceof PeerScore ? score : undefined
}

/** The gossipsub score of `peer` as seen by `host`, or undefined when it cannot be read. */
export function gossipScore (host: MeshHost, peer: string): number | undefined {
  return peerScoreOf(host)?.score(peer)
}

export class Events {
  readonly agentId: string
  readonly log: EventLog
  readonly stats: EventsStats
  private readonly host: MeshHost
  private readonly runs: LocalRuns
  private readonly sync: SyncClient
  private readonly limiter = new Limiter(SYNC_CONCURRENCY)
  private readonly tracks = new Map<string, CorrTrack>()
  private readonly byTopic = new Map<string, CorrTrack>()
  /** Copies of other nodes' events placed and not yet handed to the log (see store). */
  private copies: Array<{ t: CorrTrack, events: AgentEvent[] }> = []
  private copiesCount = 0
  private copyTimer?: ReturnType<typeof setTimeout>
  /** The copies' write in progress: the next one starts after it, so the log keeps the placement order. */
  private copyWrite: Promise<void> = Promise.resolve()
  /** Events of runs this node delegated, handed to LocalRuns once the copies holding them are written. */
  private delegatedNotes: AgentEvent[][] = []
  /** Topics still joined after their track ended (see leaveTopic), and the timer that leaves them. */
  private readonly lingering = new Set<string>()
  private lingerTimer?: ReturnType<typeof setTimeout>
  private unserve?: () => Promise<void>
  private offRuns?: () => void
  private started = false
  private readonly onSubscriptionChange = (evt: CustomEvent<SubscriptionChangeData>): void => {
    const peer = evt.detail.peerId.toString()
    for (const s of evt.detail.subscriptions) {
      if (!s.subscribe) continue
      const t = this.byTopic.get(s.topic)
      if (t !== undefined && t.participants.has(peer) && this.interested(t)) this.joined(t, peer)
    }
  }

  constructor (init: EventsInit) {
    this.host = init.host
    this.runs = init.runs
    this.agentId = agentIdOf(init.privateKey)
    this.log = new EventLog(init.datastore)
    this.sync = new SyncClient(init.host)
    const gossip = Object.fromEntries(Object.keys(VERDICT_RESULT).map(k => [k, 0])) as Record<Verdict, number>
    this.stats = { gossip, synced: 0, syncErrors: {}, published: 0 }
    // registered now so events committed while the node starts (restart recovery) are not missed
    this.offRuns = this.runs.onEvent((event, run) => { this.onLocalEvent(event, run) })
  }

  async start (): Promise<void> {
    if (this.started) return
    this.unserve = await serveSync(this.host, this.log, async () => this.flushCopies())
    this.host.services.pubsub.addEventListener('subscription-change', this.onSubscriptionChange)
    this.started = true
    // pick up what was live before a restart: runs this node executes or delegated
    for await (const run of this.runs.executing()) if (isLive(run.state)) this.trackLocalRun(run)
    for await (const run of this.runs.delegated()) if (isLive(run.state)) this.follow(run)
  }

  async stop (): Promise<void> {
    if (!this.started) return
    this.started = false
    this.offRuns?.()
    this.host.services.pubsub.removeEventListener('subscription-change', this.onSubscriptionChange)
    for (const t of [...this.tracks.values()]) {
      for (const s of [...t.subs]) s.close()
      this.untrack(t)
    }
    this.leaveLingering()
    await this.flushCopies().catch(() => {})
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
   * 'topic_limit').
   */
  async subscribe (correlationId: string, opts: SubscribeOptions = {}): Promise<EventSubscription> {
    this.assertStarted()
    correlationTopic(correlationId)
    const hints = this.checkHints(opts)
    const t = this.ensureTrack(correlationId, true, true)
    const sub = new EventSubscription(correlationId, opts, (s) => {
      t.subs.delete(s)
      this.maybeUntrack(t)
    })
    if (sub.closed) {
      this.maybeUntrack(t)
      return sub
    }
    t.holds++
    try {
      const known = [...t.participants]
      this.addHints(t, hints)
      for (const p of known) this.discover(t, p)
      // history from the log, and the subscriber joins live delivery in the same
      // locked step: events are placed on this lock or while it is idle, and stored
      // before any later task on it runs, so none falls between
      await this.withLock(t, async () => {
        await this.flushCopies().catch(() => {})
        const held = (await this.log.runsOf(correlationId)).sort()
        // from now on a run missing from this list has nothing in the log to look up
        t.logRuns ??= new Set(held)
        for (const runId of held) {
          if (opts.history === false) {
            const rt = await this.runTrack(t, runId)
            if (rt !== undefined) sub.startAfter(runId, rt.head?.seq ?? 0)
            continue
          }
          for (let after = 0; ;) {
            const events = await this.log.read(runId, after, SYNC_MAX_EVENTS_PER_RESPONSE)
            for (const e of events) sub.deliver(e)
            const last = events.at(-1)
            if (last === undefined || events.length < SYNC_MAX_EVENTS_PER_RESPONSE) break
            after = last.seq
          }
        }
        if (!sub.closed && !t.closed) t.subs.add(sub)
      })
      this.refresh(t)
      await this.settle(t, Date.now() + SYNC_TIMEOUT_MS, 1)
    } finally {
      t.holds--
      // a subscription closed meanwhile (its signal aborted) no longer keeps the topic
      this.maybeUntrack(t)
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
    const hints = this.checkHints(opts)
    const t = this.ensureTrack(correlationId, false, false)
    t.holds++
    try {
      this.addHints(t, hints)
      for (const p of t.participants) this.discover(t, p)
      this.refresh(t)
      await this.settle(t, Date.now() + (opts.timeoutMs ?? REPLAY_TIMEOUT_MS), REPLAY_MAX_ROUNDS)
      return buildReplay(correlationId, await this.readCorrelation(correlationId))
    } finally {
      t.holds--
      this.maybeUntrack(t)
    }
  }

  /** Every event this node holds for a correlation, run_id -> events from seq 1 (chains checked). */
  async readCorrelation (correlationId: string): Promise<Map<string, AgentEvent[]>> {
    const out = new Map<string, AgentEvent[]>()
    await this.flushCopies().catch(() => {})
    for (const runId of (await this.log.runsOf(correlationId)).sort()) {
      const events: AgentEvent[] = []
      for (let after = 0; ;) {
        const page = await this.log.read(runId, after, SYNC_MAX_EVENTS_PER_RESPONSE)
        events.push(...page)
        const last = page.at(-1)
        if (last === undefined || page.length < SYNC_MAX_EVENTS_PER_RESPONSE) break
        after = last.seq
      }
      checkChain(events, undefined)
      out.set(runId, events)
    }
    return out
  }

  /**
   * Sync one run from one peer (default: its executor) into the log. Returns
   * the events that were new here. Throws a typed error when the peer lies
   * (INVALID_SIGNATURE, INVALID_REQUEST), stalls (TIMEOUT) or cannot be
   * reached (AGENT_NOT_FOUND); nothing it sent is kept then.
   */
  async fetchRun (runId: string, opts: FetchOptions = {}): Promise<AgentEvent[]> {
    this.assertStarted()
    const from = opts.from ?? executorOfRun(runId)
    const peer = peerIdOfAgent(from)
    await this.flushCopies().catch(() => {})
    const head = await this.log.head(runId)
    const events = await this.limiter.run(async () => this.sync.run(peer, runId, head, opts))
    const first = events[0]
    if (first === undefined) return []
    const t = this.ensureTrack(first.correlation_id, false, false)
    t.holds++
    try {
      return await this.ingest(t, events, 'sync')
    } finally {
      t.holds--
      this.maybeUntrack(t)
    }
  }

  /** Sync every run of a correlation `from` a peer into the log; same errors as fetchRun. */
  async fetchCorrelation (correlationId: string, opts: FetchOptions & { from: string }): Promise<AgentEvent[]> {
    this.assertStarted()
    correlationTopic(correlationId)
    const peer = peerIdOfAgent(opts.from)
    const byRun = await this.limiter.run(async () => this.sync.correlation(peer, correlationId, opts))
    const t = this.ensureTrack(correlationId, false, false)
    t.holds++
    try {
      const out: AgentEvent[] = []
      for (const events of byRun.values()) out.push(...await this.ingest(t, events, 'sync'))
      return out
    } finally {
      t.holds--
      this.maybeUntrack(t)
    }
  }

  /**
   * Follow a run this node delegated (called when delegate or handoff returns
   * its handle): join its correlation and fetch its events from the executor.
   */
  /**
   * Join a correlation's topic before delegating into it. The SUBSCRIBE leaves
   * ahead of the delegate request on the same connection, so the executor
   * counts this node among the topic's subscribers when it publishes
   * run.started, and gossip brings it: follow() then need not fetch. Call the
   * returned function once the delegation returned or failed.
   */
  prepare (correlationId: string): () => void {
    if (!this.started || !isCorrelationId(correlationId)) return () => {}
    const t = this.ensureTrack(correlationId, true, false)
    t.pending++
    let released = false
    return () => {
      if (released) return
      released = true
      t.pending--
      this.maybeUntrack(t)
    }
  }

  follow (run: Run, opts: FollowOptions = {}): void {
    if (!this.started) return
    const t = this.ensureTrack(run.correlation_id, true, false)
    const seen = t.runs.has(run.run_id)
    const rt = this.newRunTrack(t, run.run_id, false)
    if (rt !== undefined) {
      rt.interest = true
      // a run its executor has just created: the log cannot hold any of it unless this node
      // placed some already, which would have made the track, so the gossip copy of
      // run.started is placed at once instead of behind a log lookup
      if (opts.fresh === true && !seen && !rt.local) rt.headLoaded = true
      if (rt.state === 'unknown' && !isLive(run.state)) rt.state = run.state
    }
    if (run.delegator === this.agentId) t.delegated.add(run.run_id)
    this.addParticipant(t, run.agent_id)
    this.addParticipant(t, run.delegator)
    // prepared: gossip should have brought (or will bring) the events; the tail sync
    // fetches them if it did not, so a delegation costs no sync in the usual case
    if (rt !== undefined && opts.prepared !== true) this.fetch(t, rt)
    this.refresh(t)
  }

  /** Correlations this node follows on gossip. */
  topics (): string[] {
    return [...this.tracks.values()].filter(t => t.gossip).map(t => t.id)
  }

  /** Agents this node dials and syncs from for a correlation. */
  participants (correlationId: string): string[] {
    return [...(this.tracks.get(correlationId)?.participants ?? [])]
  }

  // ---- tracking ----------------------------------------------------------------------------

  private assertStarted (): void {
    if (!this.started) throw new AapError('INTERNAL', 'the events service is not started')
  }

  private checkHints (opts: { participants?: string[], runs?: string[] }): { participants: string[], runs: string[] } {
    const participants = opts.participants ?? []
    const runs = opts.runs ?? []
    if (participants.length > EVENTS_MAX_PARTICIPANTS) throw new InvalidRequestError(`at most ${EVENTS_MAX_PARTICIPANTS} participants`)
    for (const p of participants) peerIdOfAgent(p)
    for (const r of runs) {
      if (executorOfRun(r) === '') throw new InvalidRequestError(`"${r.slice(0, 80)}" is not a run id`)
      peerIdOfAgent(executorOfRun(r))
    }
    return { participants, runs }
  }

  private addHints (t: CorrTrack, hints: { participants: string[], runs: string[] }): void {
    for (const p of hints.participants) this.addParticipant(t, p)
    for (const r of hints.runs) {
      const rt = this.newRunTrack(t, r, false)
      if (rt === undefined) continue
      rt.interest = true
      this.fetch(t, rt)
    }
  }

  /**
   * The track of a correlation, created if needed. With `gossip`, the node
   * joins the topic (validator and score parameters first); an explicit
   * subscriber over MAX_CORRELATION_TOPICS gets a typed error, automatic
   * tracking (executor, delegator) just stays off gossip.
   */
  private ensureTrack (correlationId: string, gossip: boolean, explicit: boolean): CorrTrack {
    let t = this.tracks.get(correlationId)
    if (t === undefined) {
      t = {
        id: correlationId,
        topic: correlationTopic(correlationId),
        runs: new Map(),
        participants: new Set(),
        discovering: new Set(),
        discoverAgain: new Set(),
        subs: new Set(),
        delegated: new Set(),
        gossip: false,
        placed: 0,
        placedAtTail: 0,
        holds: 0,
        pending: 0,
        lock: Promise.resolve(),
        busy: 0,
        inflight: new Set(),
        tailDelay: EVENTS_TAIL_SYNC_MIN_MS,
        closed: false
      }
      this.tracks.set(correlationId, t)
    }
    if (gossip && !t.gossip) {
      // byTopic holds exactly the joined topics
      if (this.byTopic.size >= MAX_CORRELATION_TOPICS) {
        if (explicit) {
          if (t.subs.size === 0 && t.holds === 0) this.maybeUntrack(t)
          throw new InvalidRequestError(`this node already follows ${MAX_CORRELATION_TOPICS} correlations`, { reason: 'topic_limit', max: MAX_CORRELATION_TOPICS })
        }
        return t
      }
      this.joinTopic(t)
    }
    return t
  }

  private joinTopic (t: CorrTrack): void {
    const pubsub = this.host.services.pubsub
    // still joined from a track that ended a moment ago: take the topic over, no SUBSCRIBE
    const lingered = this.lingering.delete(t.topic)
    // lingering topics count towards the node's joined topics: make room first
    if (!lingered && this.byTopic.size + this.lingering.size >= MAX_CORRELATION_TOPICS) this.leaveLingering()
    pubsub.topicValidators.set(t.topic, (_peer: PeerId, msg: Message) => {
      const v = this.judge(t, msg)
      return typeof v === 'string' ? VERDICT_RESULT[v] : v.then(x => VERDICT_RESULT[x])
    })
    const score = peerScoreOf(this.host)
    if (score !== undefined && score.params.topics[t.topic] === undefined) {
      score.params.topics[t.topic] = createTopicScoreParams({
        topicWeight: 1,
        timeInMeshWeight: 0,
        timeInMeshQuantum: 1,
        firstMessageDeliveriesWeight: 0,
        meshMessageDeliveriesWeight: 0,
        meshFailurePenaltyWeight: 0,
        invalidMessageDeliveriesWeight: EVENTS_SCORE_INVALID_WEIGHT,
        invalidMessageDeliveriesDecay: EVENTS_SCORE_INVALID_DECAY
      })
    }
    if (!lingered) pubsub.subscribe(t.topic)
    t.gossip = true
    this.byTopic.set(t.topic, t)
  }

  /**
   * Stop following a topic. The node stays joined for up to
   * EVENTS_TOPIC_LINGER_MS, ignoring what comes in: a track of the same
   * correlation started meanwhile (the next step of a task) takes it over
   * without a SUBSCRIBE, and the topics left in one window go in one
   * UNSUBSCRIBE message per peer instead of one message per topic.
   */
  private leaveTopic (t: CorrTrack): void {
    if (!t.gossip) return
    t.gossip = false
    this.byTopic.delete(t.topic)
    if (!this.started) {
      this.unsubscribe([t.topic])
      return
    }
    this.host.services.pubsub.topicValidators.set(t.topic, () => {
      this.count('untracked')
      return TopicValidatorResult.Ignore
    })
    this.lingering.add(t.topic)
    if (this.lingerTimer === undefined) {
      this.lingerTimer = setTimeout(() => { this.leaveLingering() }, EVENTS_TOPIC_LINGER_MS)
      this.lingerTimer.unref?.()
    }
  }

  /** Leave every lingering topic now. */
  private leaveLingering (): void {
    clearTimeout(this.lingerTimer)
    this.lingerTimer = undefined
    const topics = [...this.lingering]
    this.lingering.clear()
    this.unsubscribe(topics)
  }

  /**
   * Leave topics: one UNSUBSCRIBE message per connected peer for all of them.
   * gossipsub's own unsubscribe() sends one message per topic and peer; its
   * per-peer send of a subscription list is not part of the GossipSub
   * interface, so the shape is checked and unsubscribe() is the fallback.
   */
  private unsubscribe (topics: string[]): void {
    if (topics.length === 0) return
    const pubsub = this.host.services.pubsub
    const router = pubsub as unknown as {
      subscriptions?: unknown
      peers?: unknown
      sendSubscriptions?: unknown
      leave?: unknown
    }
    const { subscriptions, peers, sendSubscriptions, leave } = router
    try {
      if (topics.length > 1 && subscriptions instanceof Set && peers instanceof Map &&
        typeof sendSubscriptions === 'function' && typeof leave === 'function') {
        const gone = topics.filter(topic => subscriptions.delete(topic))
        if (gone.length > 0) for (const peer of peers.keys()) sendSubscriptions.call(router, peer, gone, false)
        for (const topic of topics) leave.call(router, topic)
      } else {
        for (const topic of topics) pubsub.unsubscribe(topic)
      }
    } catch { /* the router is stopping */ }
    const score = peerScoreOf(this.host)
    for (const topic of topics) {
      pubsub.topicValidators.delete(topic)
      if (score !== undefined) {
        // the topic's penalties go with it, and so does its per-peer bookkeeping
        Reflect.deleteProperty(score.params.topics, topic)
        for (const stats of score.peerStats.values()) Reflect.deleteProperty(stats.topics, topic)
      }
    }
  }

  private keep (t: CorrTrack): boolean {
    if (t.subs.size > 0 || t.holds > 0 || t.pending > 0) return true
    for (const rt of t.runs.values()) if (rt.interest && isLive(rt.state)) return true
    return false
  }

  private maybeUntrack (t: CorrTrack): void {
    if (!t.closed && !this.keep(t)) this.untrack(t)
  }

  private untrack (t: CorrTrack): void {
    t.closed = true
    clearTimeout(t.tailTimer)
    this.leaveTopic(t)
    if (this.tracks.get(t.id) === t) this.tracks.delete(t.id)
  }

  private newRunTrack (t: CorrTrack, runId: string, local: boolean): RunTrack | undefined {
    let rt = t.runs.get(runId)
    if (rt !== undefined) return rt
    if (t.runs.size >= EVENTS_MAX_RUNS_PER_CORRELATION) return undefined
    const executor = executorOfRun(runId)
    rt = {
      run_id: runId,
      executor,
      local: local || executor === this.agentId,
      interest: local || executor === this.agentId,
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
  private async runTrack (t: CorrTrack, runId: string): Promise<RunTrack | undefined> {
    const rt = this.newRunTrack(t, runId, false)
    if (rt === undefined || rt.headLoaded) return rt
    rt.headLoaded = true
    await this.flushCopies().catch(() => {})
    const head = await this.log.head(runId)
    if (head !== undefined && (rt.head === undefined || head.seq > rt.head.seq)) {
      rt.head = head
      rt.headHash = undefined
      rt.state = stateAfter(head)
    }
    return rt
  }

  /** The hash the next event of the run must name as `prev` (null before seq 1). */
  private headHashOf (rt: RunTrack): string | null {
    if (rt.head === undefined) return null
    rt.headHash ??= eventHash(rt.head)
    return rt.headHash
  }

  private addParticipant (t: CorrTrack, agentId: string): void {
    if (agentId === this.agentId || agentId === '' || t.participants.has(agentId)) return
    if (t.participants.size >= EVENTS_MAX_PARTICIPANTS) return
    try {
      peerIdOfAgent(agentId)
    } catch {
      return
    }
    t.participants.add(agentId)
    // correlation-wide syncs are for someone waiting on this node (a subscriber, a replay);
    // an executor's or delegator's own tracking learns from its runs' events and fetches
    if (this.interested(t)) this.discover(t, agentId)
  }

  private interested (t: CorrTrack): boolean {
    return t.subs.size > 0 || t.holds > 0
  }

  private async withLock<T> (t: CorrTrack, fn: () => Promise<T>): Promise<T> {
    t.busy++
    const run = t.lock.then(fn, fn)
    t.lock = run.catch(() => {})
    try {
      return await run
    } finally {
      t.busy--
    }
  }

  /** Run background work of a track, remembered so replay and subscribe can wait for it. */
  private spawn (t: CorrTrack, fn: () => Promise<void>): void {
    const p = fn().catch(() => {})
    t.inflight.add(p)
    void p.finally(() => { t.inflight.delete(p) })
  }

  /** Wait until the track's background syncs are done (and those they start), in bounded rounds. */
  private async settle (t: CorrTrack, deadline: number, rounds: number): Promise<void> {
    for (let i = 0; i < rounds * 4 && t.inflight.size > 0; i++) {
      const left = deadline - Date.now()
      if (left <= 0) return
      let timer: ReturnType<typeof setTimeout> | undefined
      const expired = new Promise<void>(resolve => { timer = setTimeout(resolve, left) })
      await Promise.race([Promise.allSettled([...t.inflight]), expired])
      clearTimeout(timer)
    }
  }

  // ---- the executor's side: publish what was committed -------------------------------------

  private trackLocalRun (run: Run): void {
    const t = this.ensureTrack(run.correlation_id, false, false)
    const rt = this.newRunTrack(t, run.run_id, true)
    if (rt !== undefined) rt.state = run.state
    this.addParticipant(t, run.delegator)
  }

  private onLocalEvent (event: AgentEvent, run: Run): void {
    if (!this.started) return
    // The executor publishes without joining the topic: flood publish reaches every peer known
    // to subscribe, joined or not, and a join would cost a SUBSCRIBE to every connected peer
    // plus a GRAFT exchange with every subscriber, just as the first event goes out. It joins
    // only when it follows the correlation for another reason (a subscriber, a run it delegated).
    const t = this.ensureTrack(event.correlation_id, false, false)
    this.stats.published++
    this.host.services.pubsub.publish(t.topic, enc.encode(JSON.stringify(event))).catch(() => {
      // nobody to send to yet, or the router is stopping: subscribers sync it from the log
    })
    const apply = (): void => {
      const rt = this.newRunTrack(t, event.run_id, true)
      if (rt === undefined) return
      rt.local = true
      rt.headLoaded = true
      if (event.seq === 1) t.logRuns?.add(event.run_id)
      if (rt.head !== undefined && event.seq <= rt.head.seq) return
      rt.head = event
      rt.headHash = undefined
      rt.state = run.state
      for (const s of t.subs) s.deliver(event)
      this.learn(t, event)
    }
    if (t.busy === 0) {
      apply()
      this.maybeUntrack(t)
    } else {
      void this.withLock(t, async () => { apply() }).finally(() => { this.maybeUntrack(t) })
    }
  }

  // ---- the receiving side --------------------------------------------------------------------

  private count (v: Verdict): Verdict {
    this.stats.gossip[v]++
    return v
  }

  /**
   * The topic validator: decode, verify, then place the event in its run's
   * chain. Synchronous when nothing is queued on the correlation and the run's
   * head is known (the usual case), else queued.
   */
  private judge (t: CorrTrack, msg: Message): Verdict | Promise<Verdict> {
    if (t.closed) return this.count('untracked')
    if (msg.data.byteLength > EVENT_MAX_BYTES) return this.count('invalid')
    let value: unknown
    try {
      value = JSON.parse(dec.decode(msg.data))
    } catch {
      return this.count('undecodable')
    }
    let event: AgentEvent
    try {
      event = verifyEventSync(value)
    } catch {
      return this.count('invalid')
    }
    if (event.correlation_id !== t.id) return this.count('wrong_correlation')
    if (executorOfRun(event.run_id) === this.agentId) return this.count('own_run')
    if (t.busy === 0 && this.ready(t, [event])) {
      const placed = this.placeNow(t, [event])
      this.store(t, placed.accepted)
      this.afterIngest(t, placed.accepted)
      return this.count(placed.first)
    }
    return this.placeQueued(t, [event]).then((placed) => {
      this.afterIngest(t, placed.accepted)
      return this.count(placed.first)
    })
  }

  /** Whether every run of `events` has its head in memory (or certainly has none in the log). */
  private ready (t: CorrTrack, events: AgentEvent[]): boolean {
    for (const e of events) {
      const rt = t.runs.get(e.run_id)
      if (rt === undefined ? t.logRuns === undefined || t.logRuns.has(e.run_id) : !rt.headLoaded) return false
    }
    return true
  }

  /** Load what placing `events` needs, then place them; on the lock. */
  private async placeQueued (t: CorrTrack, events: AgentEvent[]): Promise<{ first: Verdict, accepted: AgentEvent[] }> {
    return this.withLock(t, async () => {
      for (const runId of new Set(events.map(e => e.run_id))) await this.runTrack(t, runId)
      const placed = this.placeNow(t, events)
      await this.persist(t, placed.accepted)
      return placed
    })
  }

  /**
   * Put verified events of one correlation where they belong, at once. Only
   * events that extend a run's contiguous chain are taken (heads moved,
   * subscribers served); a gap or an unseen run starts a fetch. The caller
   * stores what was taken, in order, before anything else touches the log.
   */
  private placeNow (t: CorrTrack, events: AgentEvent[]): { first: Verdict, accepted: AgentEvent[] } {
    const accepted: AgentEvent[] = []
    let first: Verdict | undefined
    const note = (v: Verdict): void => { first ??= v }
    for (const e of events) {
      if (t.closed) { note('untracked'); continue }
      if (e.correlation_id !== t.id) { note('wrong_correlation'); continue }
      const rt = this.newRunTrack(t, e.run_id, false)
      if (rt === undefined) { note('over_limit'); continue }
      if (rt.local) { note('own_run'); continue }
      const headSeq = rt.head?.seq ?? 0
      if (e.seq <= headSeq) { note('duplicate'); continue }
      if (e.seq > headSeq + 1) {
        note(rt.head === undefined ? 'unknown_run' : 'gap')
        this.fetch(t, rt)
        continue
      }
      if (e.seq > EVENTS_MAX_EVENTS_PER_RUN) { note('over_limit'); continue }
      if (e.prev !== this.headHashOf(rt)) { note('conflict'); continue }
      rt.head = e
      rt.headHash = undefined
      rt.state = stateAfter(e)
      accepted.push(e)
      t.placed++
      note('accepted')
      for (const s of t.subs) s.deliver(e)
      this.learn(t, e)
    }
    return { first: first ?? 'duplicate', accepted }
  }

  /**
   * Store events placed from gossip: they join the pending copies, written
   * within EVENTS_COPY_FLUSH_MS together with whatever else is placed
   * meanwhile (see flushCopies). The placement does not wait for the write.
   */
  private store (t: CorrTrack, accepted: AgentEvent[]): void {
    if (accepted.length === 0) return
    this.copies.push({ t, events: accepted })
    this.copiesCount += accepted.length
    if (this.copiesCount >= EVENTS_COPY_MAX_PENDING) {
      void this.flushCopies().catch(() => {})
    } else if (this.copyTimer === undefined) {
      this.copyTimer = setTimeout(() => { void this.flushCopies().catch(() => {}) }, EVENTS_COPY_FLUSH_MS)
      this.copyTimer.unref?.()
    }
  }

  /** Store placed events now (with every copy pending before them), for callers that wait on the write. */
  private async persist (t: CorrTrack, accepted: AgentEvent[]): Promise<void> {
    if (accepted.length > 0) {
      this.copies.push({ t, events: accepted })
      this.copiesCount += accepted.length
    }
    await this.flushCopies()
  }

  /**
   * Write every pending copy, in the order the events were placed, in one
   * batch, behind the write before it (so the log of each run stays
   * contiguous from seq 1), then the outgoing records they changed. If the
   * write fails, the runs' heads go back to what the log holds (reloaded on
   * next use), so the events are fetched and stored again rather than
   * leaving a hole behind. Resolves once everything placed so far is in the
   * log: every read of the log waits for it.
   */
  private async flushCopies (): Promise<void> {
    clearTimeout(this.copyTimer)
    this.copyTimer = undefined
    const group = this.copies
    const delegated = this.delegatedNotes
    this.copies = []
    this.copiesCount = 0
    this.delegatedNotes = []
    const write = this.copyWrite.then(async () => {
      if (group.length === 0) return
      try {
        await this.log.append(group.flatMap(g => g.events))
      } catch (err) {
        for (const g of group) {
          for (const runId of new Set(g.events.map(e => e.run_id))) {
            const rt = g.t.runs.get(runId)
            if (rt === undefined) continue
            rt.head = undefined
            rt.headHash = undefined
            rt.headLoaded = false
          }
        }
        throw err
      }
      for (const g of group) for (const e of g.events) if (e.seq === 1) g.t.logRuns?.add(e.run_id)
    })
    this.copyWrite = write.catch(() => {})
    try {
      await write
    } finally {
      // the delegator's records follow the copies they were folded from
      for (const events of delegated) void this.runs.delegatedEvents(events).catch(() => {})
    }
  }

  /** Sync results: verified and chain-checked by the client, placed like gossip. */
  private async ingest (t: CorrTrack, events: AgentEvent[], _source: 'sync'): Promise<AgentEvent[]> {
    const { accepted } = await this.placeQueued(t, events)
    this.stats.synced += accepted.length
    this.afterIngest(t, accepted)
    return accepted
  }

  private noteDelegated (events: AgentEvent[]): void {
    this.delegatedNotes.push(events)
    if (this.copyTimer === undefined && this.copies.length === 0) void this.flushCopies().catch(() => {})
  }

  private afterIngest (t: CorrTrack, accepted: AgentEvent[]): void {
    if (accepted.length === 0) return
    if (t.delegated.size > 0) {
      const byRun = new Map<string, AgentEvent[]>()
      for (const e of accepted) {
        if (!t.delegated.has(e.run_id)) continue
        const list = byRun.get(e.run_id)
        if (list === undefined) byRun.set(e.run_id, [e])
        else list.push(e)
      }
      for (const events of byRun.values()) this.noteDelegated(events)
    }
    // something moved: look again soon
    t.tailDelay = EVENTS_TAIL_SYNC_MIN_MS
    this.refresh(t)
    this.maybeUntrack(t)
  }

  /** What an event teaches about the correlation: who takes part, which runs follow. */
  private learn (t: CorrTrack, e: AgentEvent): void {
    for (const p of participantsOf(e)) this.addParticipant(t, p)
    const from = t.runs.get(e.run_id)
    for (const l of linkedRunsOf(e)) {
      if (executorOfRun(l.run_id) !== l.agent_id) continue
      const known = t.runs.get(l.run_id)
      const rt = known ?? this.newRunTrack(t, l.run_id, false)
      if (rt === undefined) continue
      // the successor (or predecessor) of a run this node follows is followed too
      if (from?.interest === true) rt.interest = true
      if (known === undefined && !rt.local) this.fetch(t, rt)
    }
  }

  // ---- syncing ---------------------------------------------------------------------------

  private noteSyncError (err: unknown): void {
    const code = toAapError(err).code
    this.stats.syncErrors[code] = (this.stats.syncErrors[code] ?? 0) + 1
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
  private joined (t: CorrTrack, agentId: string): void {
    const placed = t.placed
    const timer = setTimeout(() => {
      if (!t.closed && t.placed === placed) this.discover(t, agentId)
    }, EVENTS_JOIN_SYNC_DELAY_MS)
    timer.unref?.()
  }

  /** Correlation sync from one participant (coalesced: one in flight, one more if asked meanwhile). */
  private discover (t: CorrTrack, agentId: string): void {
    if (t.closed || !this.started) return
    if (t.discovering.has(agentId)) {
      t.discoverAgain.add(agentId)
      return
    }
    t.discovering.add(agentId)
    this.spawn(t, async () => {
      try {
        do {
          t.discoverAgain.delete(agentId)
          try {
            const byRun = await this.limiter.run(async () => this.sync.correlation(peerIdOfAgent(agentId), t.id))
            for (const events of byRun.values()) {
              if (t.closed) return
              await this.ingest(t, events, 'sync')
            }
          } catch (err) {
            this.noteSyncError(err)
          }
        } while (t.discoverAgain.has(agentId) && !t.closed)
      } finally {
        t.discovering.delete(agentId)
      }
    })
  }

  /**
   * Fetch a run's events after the head held here: from its executor, and
   * only when the executor cannot answer, from other participants.
   */
  private fetch (t: CorrTrack, rt: RunTrack): void {
    if (t.closed || rt.local || !this.started) return
    if (rt.fetching) {
      rt.fetchAgain = true
      return
    }
    rt.fetching = true
    this.spawn(t, async () => {
      try {
        do {
          rt.fetchAgain = false
          await this.runTrack(t, rt.run_id)
          const sources = [rt.executor, ...[...t.participants].filter(p => p !== rt.executor)]
          for (const source of sources) {
            if (t.closed) return
            try {
              const events = await this.limiter.run(async () => this.sync.run(peerIdOfAgent(source), rt.run_id, rt.head))
              await this.ingest(t, events, 'sync')
              if (events.length > 0 || source === rt.executor) break
            } catch (err) {
              this.noteSyncError(err)
            }
          }
        } while (rt.fetchAgain && !t.closed)
      } finally {
        rt.fetching = false
      }
    })
  }

  /**
   * Re-arm the tail timer: while a run of the correlation may still move (or
   * none is known yet and someone is waiting), its tail is synced again after
   * a delay that doubles up to EVENTS_TAIL_SYNC_MAX_MS.
   */
  private refresh (t: CorrTrack): void {
    if (t.closed || !this.started) return
    clearTimeout(t.tailTimer)
    const waiting = [...t.runs.values()].some(rt => !rt.local && isLive(rt.state)) ||
      (t.runs.size === 0 && (t.subs.size > 0 || t.holds > 0))
    if (!waiting) return
    t.tailTimer = setTimeout(() => {
      t.tailDelay = Math.min(t.tailDelay * 2, EVENTS_TAIL_SYNC_MAX_MS)
      // runs nobody told us about (a first publish that missed us, a sub-delegation) only show up
      // in a participant's log, so someone waiting on this correlation asks them too: in a round
      // where nothing came in. While events keep arriving the correlation is flowing, and a whole
      // correlation from every participant per round costs more than everything gossip carries
      const flowing = t.placed !== t.placedAtTail
      t.placedAtTail = t.placed
      if (!flowing && this.interested(t)) for (const p of t.participants) this.discover(t, p)
      for (const rt of t.runs.values()) if (!rt.local && isLive(rt.state)) this.fetch(t, rt)
      this.refresh(t)
    }, t.tailDelay)
    t.tailTimer.unref?.()
  }
}

