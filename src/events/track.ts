/**
 * What the events service holds per correlation it follows (CorrTrack) and
 * per run of it (RunTrack), and the verdicts on events that come in.
 */
import { TopicValidatorResult } from '@libp2p/gossipsub'
import { EVENTS_TAIL_SYNC_MIN_MS } from '../constants.ts'
import type { RunTicket } from '../runlog/ticket.ts'
import type { AgentEvent, RunState } from '../runlog/types.ts'
import { Mutex } from '../util/concurrency.ts'
import type { EventSubscription } from './subscription.ts'
import { correlationTopic } from './topic.ts'

/** Why an event was or was not taken; counted in `EventsStats.gossip`. */
export type Verdict =
  | 'accepted' | 'early' | 'relayed' | 'duplicate' | 'gap' | 'unknown_run' | 'own_run' | 'over_limit' | 'untracked'
  | 'lineage_pending' | 'foreign_owner' | 'not_named'
  | 'conflict' | 'undecodable' | 'invalid' | 'wrong_correlation' | 'lineage_rejected' | 'forged_verdict' | 'fork'

/** What gossipsub does with a message of each verdict: forgeries are rejected (and scored), the rest ignored. */
export const VERDICT_RESULT: Record<Verdict, TopicValidatorResult> = {
  accepted: TopicValidatorResult.Accept,
  // verified, ahead of the chain held here: kept until its predecessor comes, and relayed meanwhile
  early: TopicValidatorResult.Accept,
  // verified, one of the last events placed here (by sync, before gossip brought it): relayed for the mesh
  relayed: TopicValidatorResult.Accept,
  // the executor's second event at a seq held here (forks.ts): relayed once, so every holder gets the proof
  fork: TopicValidatorResult.Accept,
  duplicate: TopicValidatorResult.Ignore,
  gap: TopicValidatorResult.Ignore,
  unknown_run: TopicValidatorResult.Ignore,
  own_run: TopicValidatorResult.Ignore,
  over_limit: TopicValidatorResult.Ignore,
  untracked: TopicValidatorResult.Ignore,
  // a run whose ancestors are not known yet, or a run of another owner's task under the same id
  lineage_pending: TopicValidatorResult.Ignore,
  foreign_owner: TopicValidatorResult.Ignore,
  // a successor its predecessor did not hand off to after all (an attempt a retried handoff replaced): the receiver
  // followed the protocol, so its events are not forgeries
  not_named: TopicValidatorResult.Ignore,
  // a run that claims a place it cannot prove (no valid ticket, false inheritance): a forgery
  lineage_rejected: TopicValidatorResult.Reject,
  // a liveness verdict signed by anyone but the run's delegator
  forged_verdict: TopicValidatorResult.Reject,
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
  /** Sync requests this node made: whole correlations, and run tails (gaps, unknown runs, the tail timer). */
  syncRequests: { correlation: number, run: number }
  /** Failed syncs by error code. */
  syncErrors: Record<string, number>
  /** Events this node published on gossip: its own runs', its verdicts, the executor's events it republished. */
  published: number
  /** The same, not published: no connected peer took the correlation's topic. */
  unpublished: number
  /** Writes of event copies that failed (the events are fetched and stored again). */
  copyWriteErrors: number
  /** Liveness verdicts held here that the executor's own event at their seq replaced (protocols/liveness.md). */
  superseded: number
  /** Correlations taken off gossip, still followed by the tail sync, to give their topic to an explicit subscriber. */
  topicsYielded: number
  /** Participants not added because a correlation held EVENTS_MAX_PARTICIPANTS that nobody had vouched for less. */
  participantsRefused: number
  /** Events held early (ahead of their run's chain) let go after EVENTS_EARLY_HOLD_MS with the gap still open. */
  earlyDropped: number
  /** Gossiped events not queued because EVENTS_LOCK_WAITING_MAX waited on their correlation's lock (placement.ts shed); in gossip.gap too. */
  lockShed: number
  /**
   * What else did not queue on a correlation's lock past its bound (lock-queues.ts, local-events.ts): events
   * of this node's own runs read from the log later instead of each queued, sync pages not placed (the sync
   * made again once the lock drains), subscriptions refused, catch-up pulls that waited for the lock to drain.
   */
  lockRefused: { local: number, sync: number, subscribe: number, pull: number }
  /** Subscriptions that waited aside for their correlation's lock to make room (lock-queues.ts), refused or not. */
  subscribeWaited: number
  /** Read-backs of this node's own events from its log that failed and are made again later (local-events.ts). */
  readBackErrors: number
  /** Gossiped startless runs not fetched: their relayer had EVENTS_STARTLESS_FETCHES_PER_SOURCE in flight (startless.ts), when placed, or when their shed or lock-refused fetch came round. */
  startlessDropped: number
}

export function newStats (): EventsStats {
  const gossip = Object.fromEntries(Object.keys(VERDICT_RESULT).map(k => [k, 0])) as Record<Verdict, number>
  return { gossip, synced: 0, syncRequests: { correlation: 0, run: 0 }, syncErrors: {}, published: 0, unpublished: 0, copyWriteErrors: 0, superseded: 0, topicsYielded: 0, participantsRefused: 0, earlyDropped: 0, lockShed: 0, lockRefused: { local: 0, sync: 0, subscribe: 0, pull: 0 }, subscribeWaited: 0, readBackErrors: 0, startlessDropped: 0 }
}

export type RunTrackState = RunState | 'unknown'

/** A run state in which more events may come (unknown: nothing of it is held yet). */
export function isLive (s: RunTrackState): boolean {
  return s === 'running' || s === 'blocked' || s === 'unknown'
}

/**
 * A run known only from events past its start, that nothing here needs (no
 * run.started, no interest, no hint): a stranger can announce any number of
 * these, so they are fetched when their events come, not on the tail's rounds.
 */
export function isStartless (rt: RunTrack): boolean {
  return rt.head === undefined && rt.lineage === 'unknown' && !rt.interest && rt.told === 0
}

export interface RunTrack {
  run_id: string
  executor: string
  local: boolean
  /**
   * A run this node has its own reason to follow: it executes it, delegated
   * it, or it continues such a run after a handoff (a subscriber's hint is
   * `told`, not this). Only
   * these keep an automatically tracked correlation on gossip, so a stranger
   * announcing runs of its own cannot keep a node on a topic.
   */
  interest: boolean
  /**
   * Subscriptions and replays in progress that named this run (their `runs`
   * hint). A hint counts while its caller is there: it keeps the run from
   * being forgotten to make room, and its caller keeps the correlation
   * tracked; once they are gone it counts for nothing (a hint that named a run
   * which never shows up had kept the correlation on gossip for good).
   */
  told: number
  /** Last event of the contiguous log held here (from seq 1). */
  head?: AgentEvent
  /**
   * eventHash(head), computed when the next event's `prev` is checked, not
   * when the head moves: the last event of a run is never hashed, and runs
   * this node executes (which take no gossip) never are.
   */
  headHash: string | undefined
  headLoaded: boolean
  /** A write of the run's copies failed: its log is cut at its first hole, up to this seq, before the head is loaded again. */
  cutUpTo?: number
  /** The head load in progress (see Correlations.runTrack). */
  loading?: Promise<void>
  state: RunTrackState
  fetching: boolean
  fetchAgain: boolean
  /** Ends the fetch in progress (the run was forgotten to make room: correlations.ts evictUnproven). */
  fetchStop?: AbortController
  /**
   * The run's place in the task (src/runlog/lineage.ts), judged on its
   * run.started: only admitted runs of the track's owner are stored,
   * delivered and replayed.
   */
  lineage: 'unknown' | 'pending' | 'admitted' | 'rejected'
  /** Rejected only because its predecessor's handoff event names another run: an attempt replaced, not a forgery. */
  unnamed?: boolean
  ticket?: RunTicket
  /**
   * Rejected only because the owner's task held as many admitted runs as it takes (EVENTS_MAX_RUNS_PER_CORRELATION,
   * of them EVENTS_ROOT_RUNS_RESERVED for roots, and EVENTS_MAX_RUNS_PER_ROOT under one root): its events are over_limit.
   */
  overLimit?: true
  /** The owner whose task the run is admitted to. */
  owner?: string
  /** The root run (the owner's delegation) whose line an admitted run is in: its own id for a root. */
  root?: string
  /** Gossip events ahead of the chain held here, by seq, until their predecessor is placed (placement.ts). */
  early?: Map<number, { event: AgentEvent, bytes: number }>
  /** The fetch of the run's gap, armed when an early event came (EVENTS_GAP_SYNC_DELAY_MS). */
  gapTimer?: ReturnType<typeof setTimeout>
  /** A run.started waiting for its ancestor (lineage 'pending'), and the run it waits for. */
  heldStart?: AgentEvent
  waitingFor?: string
  /** A run of this node's just admitted whose log read for the subscribers is queued (held-delivery.ts): its events go to them by that read. */
  heldDelivery?: boolean
}

export interface CorrTrack {
  id: string
  /**
   * The agent whose task this correlation is (the root delegator): set by a
   * subscription or replay that names it, by a root run this node delegated,
   * or else by the first root run admitted here.
   */
  owner?: string
  /**
   * The owner was named (a subscription or replay, this node's own root
   * delegation), not taken from the first root run judged here: only a named
   * owner answers a replay that names none when several owners' runs are held.
   */
  ownerNamed?: boolean
  /** Runs admitted to the owner's task (EVENTS_MAX_RUNS_PER_CORRELATION bounds these) and runs not (yet) admitted. */
  admittedRuns: number
  unprovenRuns: number
  /** Admitted runs under each root run, by the root's id (EVENTS_MAX_RUNS_PER_ROOT). */
  underRoot: Map<string, number>
  topic: string
  runs: Map<string, RunTrack>
  participants: Set<string>
  /**
   * Of them, the executors of runs not (yet) admitted, known only from their
   * own events: a stranger's word. They are not asked for the whole
   * correlation, and give way when a participant someone vouches for (a
   * caller's hint, an admitted run, a run this node follows) finds the set full.
   */
  unprovenParticipants: Set<string>
  /** Participants a correlation sync is in flight from, and those asked again meanwhile. */
  syncing: Set<string>
  syncAgain: Set<string>
  /**
   * Agents whose last sync of this correlation (the whole of it, or a run's
   * tail) failed, with the error's code and when; one that answers again
   * leaves. A replay names those it could not reach (service.ts).
   */
  unreached: Map<string, { code: string, at: number, what: 'correlation' | 'run' }>
  subs: Set<EventSubscription>
  /** Runs this node delegated: their verified events go to the delegator's records (LocalRuns.delegatedEvents). */
  delegated: Set<string>
  gossip: boolean
  /** Events placed so far: tells a participant's join sync whether gossip already delivered. */
  placed: number
  /** The last EVENTS_RELAY_WINDOW events placed: `run_id#seq` -> signature (placement.ts relays their gossip copies). */
  recent: Map<string, string>
  /** Early events held for the runs of this correlation, and their bytes (see RunTrack.early). */
  earlyCount: number
  earlyBytes: number
  /** `placed` when the tail timer last fired: events came in since, so the correlation is flowing. */
  placedAtTail: number
  holds: number
  /** Delegations into this correlation in flight (see Events.prepare): keep the topic, ask nobody. */
  pending: number
  /** Writes of placed copies in flight (copies.ts): a failed one is fetched again, which needs the track. */
  writing: number
  /**
   * Every change to the runs' heads and every write to the log of this
   * correlation happens in order: inside a task on `lock`, or synchronously
   * when no task is queued (`lock.busy` is 0), so a gossip event that can be
   * placed at once does not give up its turn in the event loop.
   */
  lock: Mutex
  /** Sync answers placed or waiting on `lock` (EVENTS_LOCK_SYNCS_MAX), and subscribes and pulls waiting on it (EVENTS_LOCK_READERS_MAX). */
  lockSyncs: number
  lockReaders: number
  /**
   * Runs the log holds for this correlation, once a subscriber has listed them
   * (listing is a scan on the memory datastore, so only subscribers pay it):
   * spares a log lookup, and so a queued placement, per new run.
   */
  logRuns?: Set<string>
  /** Background syncs in flight (see Syncer.spawn). */
  inflight: Set<Promise<unknown>>
  /** Set while a tail round is due (Syncer.refresh); unset once nothing here may still move. */
  tailTimer?: ReturnType<typeof setTimeout> | undefined
  tailDelay: number
  /** Until when the tail's rounds go on with no run that may move (EVENTS_QUIET_WATCH_MS); 0: not since the last live run. */
  quietUntil: number
  /** A run that may move was known at the last refresh (Syncer.refresh: its end opens a quiet watch). */
  wasLive: boolean
  /** When each participant's join last opened a quiet watch (EVENTS_JOIN_WATCH_EVERY_MS; Syncer.joined). */
  watchOpened: Map<string, number>
  closed: boolean
}

export function newCorrTrack (correlationId: string): CorrTrack {
  return {
    id: correlationId,
    admittedRuns: 0,
    unprovenRuns: 0,
    underRoot: new Map(),
    topic: correlationTopic(correlationId),
    runs: new Map(),
    participants: new Set(),
    unprovenParticipants: new Set(),
    syncing: new Set(),
    syncAgain: new Set(),
    unreached: new Map(),
    subs: new Set(),
    delegated: new Set(),
    gossip: false,
    placed: 0,
    recent: new Map(),
    earlyCount: 0,
    earlyBytes: 0,
    placedAtTail: 0,
    holds: 0,
    pending: 0,
    writing: 0,
    lock: new Mutex(),
    lockSyncs: 0,
    lockReaders: 0,
    inflight: new Set(),
    tailDelay: EVENTS_TAIL_SYNC_MIN_MS,
    quietUntil: 0,
    wasLive: false,
    watchOpened: new Map(),
    closed: false
  }
}

/** Someone waits on this node for the correlation (a subscriber, a replay, a fetch). */
export function isInterested (t: CorrTrack): boolean {
  return t.subs.size > 0 || t.holds > 0
}

/** The participants someone vouched for (not only a stranger's own word): those a correlation-wide sync asks. */
export function vouchedParticipants (t: CorrTrack): string[] {
  return [...t.participants].filter(p => !t.unprovenParticipants.has(p))
}
