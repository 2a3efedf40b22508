/**
 * Judging and placing events: gossip messages through the topic validator,
 * sync results, and the executor's own committed events. An event is taken
 * only when it fits the schema, is signed by the executor named in its run id
 * and extends the run's chain as held here; it is then stored (copies.ts),
 * handed to subscribers in per-run seq order, and what it teaches about the
 * correlation (participants, linked runs) is learnt.
 */
import type { PeerId } from '@libp2p/interface'
import type { Message } from '@libp2p/gossipsub'
import {
  EVENTS_EARLY_MAX_BYTES, EVENTS_EARLY_MAX_PER_CORRELATION, EVENTS_GAP_SYNC_DELAY_MS, EVENTS_MAX_EVENTS_PER_RUN,
  EVENTS_TAIL_SYNC_FOLLOW_MS, EVENTS_TAIL_SYNC_MIN_MS, EVENT_MAX_BYTES
} from '../constants.ts'
import type { Logger } from '../logger.ts'
import { canonicalEvent, executorOfRun, verifyEventSync, type SignatureCache } from '../runlog/event.ts'
import { endsRun } from '../runlog/lineage.ts'
import { EVENTS_EARLY_HOLD_MS, EVENTS_LOCK_WAITING_MAX } from './constants.ts'
import { ShedFetches } from './shed.ts'
import { StartlessFetches } from './startless.ts'
import { isVerdict } from '../runlog/verdict-shape.ts'
import type { AgentEvent, Run, RunState } from '../runlog/types.ts'
import { LocalEvents } from './local-events.ts'
import type { MeshHost } from '../wire/host.ts'
import type { CopyStore } from './copies.ts'
import { forks } from './forks.ts'
import { relayable, remember, supersedes } from './placement-rules.ts'
import { linkedRunsOf, participantsOf, stateAfter } from './replay.ts'
import type { Syncer } from './syncer.ts'
import type { TopicValidator } from './membership.ts'
import { VERDICT_RESULT, isStartless, type CorrTrack, type EventsStats, type RunTrack, type Verdict } from './track.ts'
import type { Correlations } from './correlations.ts'

const enc = new TextEncoder()
const dec = new TextDecoder('utf-8', { fatal: true })

export interface PlacementInit {
  agentId: string
  host: MeshHost
  correlations: Correlations
  copies: CopyStore
  syncer: () => Syncer
  stats: EventsStats
  log: Logger
  running: () => boolean
  /** Hand subscribers the events of a run of this node's that was just admitted (read from the log, held-delivery.ts). */
  deliverHeld: (t: CorrTrack, rt: RunTrack) => void
  /** The node's verified-signature cache (src/runlog/event.ts), shared with no other node. */
  signatures: SignatureCache
  /** `e` forks the run whose head here is `held` (forks.ts): true the first time, when it is to be relayed. */
  forked: (t: CorrTrack, held: AgentEvent, e: AgentEvent) => boolean
}

export class Placement {
  private readonly i: PlacementInit
  /** Runs with gossip not queued (shed) whose fetch waits for their correlation's lock to drain (shed.ts). */
  readonly shedFetches = new ShedFetches((t, rt, ask) => { this.i.syncer().fetch(t, rt, ask) }, (t, agentId) => { this.i.syncer().syncCorrelationFrom(t, agentId) })

  /** Events of this node's own runs, queued on their correlation's lock within its bound (local-events.ts). */
  private readonly local: LocalEvents
  private readonly startless: StartlessFetches

  constructor (init: PlacementInit) {
    this.i = init
    this.startless = new StartlessFetches(init.host, init.stats, init.log)
    this.local = new LocalEvents({ correlations: init.correlations, stats: init.stats, log: init.log, apply: (t, e, state) => { this.applyLocal(t, e, state) } })
  }

  count (v: Verdict): Verdict {
    this.i.stats.gossip[v]++
    return v
  }

  /** The validator of a correlation's topic. */
  validator (t: CorrTrack): TopicValidator {
    return (peer: PeerId, msg: Message) => {
      const v = this.judge(t, msg, peer.toString())
      return typeof v === 'string' ? VERDICT_RESULT[v] : v.then(x => VERDICT_RESULT[x])
    }
  }

  /**
   * Decode, verify, then place a gossiped event in its run's chain.
   * Synchronous when nothing is queued on the correlation and the run's head
   * is known (the usual case), else queued (or shed, see there).
   */
  judge (t: CorrTrack, msg: Message, from: string): Verdict | Promise<Verdict> {
    if (t.closed) return this.count('untracked')
    if (msg.data.byteLength > EVENT_MAX_BYTES) return this.count('invalid')
    let value: unknown
    let text: string
    try {
      text = dec.decode(msg.data)
      value = JSON.parse(text)
    } catch {
      return this.count('undecodable')
    }
    let event: AgentEvent
    try {
      event = verifyEventSync(value, this.i.signatures)
    } catch {
      return this.count('invalid')
    }
    if (event.correlation_id !== t.id) return this.count('wrong_correlation')
    if (executorOfRun(event.run_id) === this.i.agentId) return this.count('own_run')
    const size = msg.data.byteLength
    if (t.lock.busy === 0 && this.ready(t, [event])) {
      const placed = this.placeNow(t, [event], size, from)
      void this.i.copies.store(t, placed.accepted)
      this.afterIngest(t, placed.accepted, 'gossip')
      return this.count(relayable(placed.first, text, event))
    }
    if (t.lock.waiting >= EVENTS_LOCK_WAITING_MAX) return this.count(this.shed(t, event, from))
    return this.placeQueued(t, [event], size, from).then((placed) => {
      this.afterIngest(t, placed.accepted, 'gossip')
      return this.count(relayable(placed.first, text, event))
    }, (err: unknown) => {
      // not stored here (see CopyStore): gossip does not penalise the sender, sync fetches it again
      this.i.log.warn({ err, correlation_id: t.id }, 'a gossiped event could not be placed')
      return this.count('gap')
    })
  }

  /**
   * EVENTS_LOCK_WAITING_MAX wait on the correlation's lock: `e` (relayed by
   * `from`) is not queued, and like a gap its run is fetched later (shed.ts).
   * A startless run is fetched then as its gossip would have had it: by
   * `from`'s ask, within its share (startless.ts), never by a DHT walk.
   */
  private shed (t: CorrTrack, e: AgentEvent, from: string): Verdict {
    this.i.stats.lockShed++
    const rt = this.i.correlations.newRunTrack(t, e.run_id, false)
    if (rt === undefined) return 'over_limit'
    // a refused run is not fetched; a pending one is when its ancestor is admitted
    if (rt.local || rt.lineage === 'rejected' || rt.lineage === 'pending') return 'gap'
    if (isStartless(rt)) this.shedFetches.arm(t, rt, () => this.startless.take(from))
    else this.shedFetches.arm(t, rt)
    return 'gap'
  }

  /** Whether every run of `events` has its head in memory (or certainly has none in the log). */
  private ready (t: CorrTrack, events: AgentEvent[]): boolean {
    for (const e of events) {
      const rt = t.runs.get(e.run_id)
      if (rt === undefined ? t.logRuns === undefined || t.logRuns.has(e.run_id) : !rt.headLoaded) return false
    }
    return true
  }

  /** Load what placing `events` needs, then place and store them; on the correlation's lock. */
  private async placeQueued (t: CorrTrack, events: AgentEvent[], gossipBytes?: number, from?: string): Promise<{ first: Verdict, accepted: AgentEvent[] }> {
    return t.lock.run(async () => {
      for (const runId of new Set(events.map(e => e.run_id))) await this.i.correlations.runTrack(t, runId)
      const placed = this.placeNow(t, events, gossipBytes, from)
      await this.i.copies.persist(t, placed.accepted)
      return placed
    })
  }

  /**
   * Put verified events of one correlation where they belong, at once. Only
   * events that extend a run's contiguous chain are taken (heads moved,
   * subscribers served); a gap or an unseen run starts a fetch. One gossip
   * event (`gossipBytes` its size, `from` the peer that relayed it) ahead of
   * its run's chain waits for its predecessor instead (holdEarly). The caller stores what was taken, in
   * order, before anything else touches the log.
   */
  private placeNow (t: CorrTrack, events: AgentEvent[], gossipBytes?: number, from?: string): { first: Verdict, accepted: AgentEvent[] } {
    const accepted: AgentEvent[] = []
    let first: Verdict | undefined
    const note = (v: Verdict): void => { first ??= v }
    for (const e of events) note(this.placeOne(t, e, accepted, gossipBytes, from))
    return { first: first ?? 'duplicate', accepted }
  }

  /** Place one event (see placeNow); what it makes admissible, and early events it leads to, are placed right behind it. */
  private placeOne (t: CorrTrack, e: AgentEvent, accepted: AgentEvent[], gossipBytes?: number, from?: string): Verdict {
    const correlations = this.i.correlations
    if (t.closed) return 'untracked'
    if (e.correlation_id !== t.id) return 'wrong_correlation'
    const rt = correlations.newRunTrack(t, e.run_id, false)
    if (rt === undefined) return 'over_limit'
    if (rt.local) return 'own_run'
    if (rt.lineage === 'rejected') return rt.overLimit === true ? 'over_limit' : rt.unnamed === true ? 'not_named' : rt.owner === undefined ? 'lineage_rejected' : 'foreign_owner'
    const headSeq = rt.head?.seq ?? 0
    if (rt.head !== undefined && e.seq === headSeq && supersedes(e, rt.head)) return this.supersede(t, rt, e, accepted)
    if (e.seq <= headSeq) return rt.head !== undefined && forks(rt.head, e) && this.i.forked(t, rt.head, e) ? 'fork' : this.repeat(t, e)
    // nothing follows the executor's own end (a liveness verdict may be followed: its run's own events replace it);
    // before, events past it were placed, put an ended run back to running and named handoff targets to fetch
    if (rt.head !== undefined && endsRun(rt.head) && !isVerdict(rt.head)) return 'conflict'
    if (rt.lineage === 'pending') return 'lineage_pending'
    // a liveness verdict (protocols/liveness.md) is signed by the run's delegator, as its ticket names it, and no one
    // else: checked before an early event is held too, or anyone's verdict ahead of the chain would be held and relayed
    // (a run whose start is not here yet is fetched instead: its verdict cannot be judged, nor held)
    if (e.declared_by !== undefined && rt.head !== undefined && (rt.ticket === undefined || e.declared_by !== rt.ticket.delegator)) return 'forged_verdict'
    if (e.seq > headSeq + 1) {
      // only as far ahead as the correlation could hold events: one farther is never reached by holding
      const reachable = e.seq - headSeq <= EVENTS_EARLY_MAX_PER_CORRELATION && e.seq <= EVENTS_MAX_EVENTS_PER_RUN
      if (gossipBytes !== undefined && rt.head !== undefined && reachable && this.holdEarly(t, rt, e, gossipBytes)) return 'early'
      // a gossiped run no one vouched for is asked of a peer reached without routing, a few per relayer (startless.ts)
      if (from !== undefined && isStartless(rt)) {
        const ask = this.startless.take(from)
        if (ask !== undefined) this.i.syncer().fetch(t, rt, ask)
      } else this.i.syncer().fetch(t, rt)
      return rt.head === undefined ? 'unknown_run' : 'gap'
    }
    if (e.seq > EVENTS_MAX_EVENTS_PER_RUN) return 'over_limit'
    if (e.prev !== correlations.headHashOf(rt)) {
      // the executor's event after a liveness verdict held here, come before its own event at the verdict's seq
      // (which will replace the verdict): ahead of the chain, held or fetched, not a fork
      if (rt.head !== undefined && isVerdict(rt.head) && !isVerdict(e)) {
        if (gossipBytes !== undefined && this.holdEarly(t, rt, e, gossipBytes)) return 'early'
        this.i.syncer().fetch(t, rt)
        return 'gap'
      }
      return 'conflict'
    }
    if (e.seq === 1 && rt.lineage !== 'admitted') {
      // a run enters the task only with a proven place (protocols/lineage.md)
      const place = correlations.judge(t, rt, e)
      if (place === 'pending') return 'lineage_pending'
      if (place === 'foreign') return 'foreign_owner'
      if (place === 'full') return 'over_limit'
      if (place === 'rejected') return 'lineage_rejected'
      if (place === 'unnamed') return 'not_named'
    }
    rt.head = e
    rt.headHash = undefined
    rt.state = stateAfter(e)
    accepted.push(e)
    t.placed++
    remember(t, e)
    for (const s of t.subs) s.deliver(e)
    this.learn(t, e)
    // an admitted start, or the run's own end (a handoff that names its successor, or an end that names none), may
    // settle runs waiting on this one
    if (e.seq === 1 || endsRun(e)) this.wake(t, e.run_id, accepted)
    this.placeEarly(t, rt, accepted)
    return 'accepted'
  }

  /**
   * A seq this node holds already. One of the last events placed here, with
   * the same signature: relayed (a sync brought it before gossip did, and the
   * mesh peers may still need it). Anything else is ignored: older repeats,
   * and another event at a seq held (a liveness verdict the executor's own
   * event replaced here, or a fork, which the nodes still waiting for that
   * seq reject).
   */
  private repeat (t: CorrTrack, e: AgentEvent): Verdict {
    return t.recent.get(`${e.run_id}#${e.seq}`) === e.signature ? 'relayed' : 'duplicate'
  }

  /**
   * Keep a verified gossip event that came ahead of its run's chain until its
   * predecessor is placed (it took a faster path), within the correlation's
   * bounds; arm the gap's fetch for when the predecessor does not come by
   * gossip. False: no room, or another event is held at that seq; the
   * caller fetches now.
   */
  private holdEarly (t: CorrTrack, rt: RunTrack, e: AgentEvent, bytes: number): boolean {
    rt.early ??= new Map()
    // the same event again is held already; another one at that seq (a fork) is not relayed
    const held = rt.early.get(e.seq)
    if (held !== undefined) return held.event.signature === e.signature
    if (t.earlyCount >= EVENTS_EARLY_MAX_PER_CORRELATION || t.earlyBytes + bytes > EVENTS_EARLY_MAX_BYTES) return false
    rt.early.set(e.seq, { event: e, bytes })
    t.earlyCount++
    t.earlyBytes += bytes
    if (rt.gapTimer === undefined) {
      rt.gapTimer = setTimeout(() => {
        rt.gapTimer = undefined
        if (t.closed || rt.early === undefined || rt.early.size === 0) return
        this.i.syncer().fetch(t, rt)
        // what the fetch has not placed by EVENTS_EARLY_HOLD_MS goes, and gives the correlation's early budget back
        rt.gapTimer = setTimeout(() => {
          rt.gapTimer = undefined
          if (!t.closed) this.letGoEarly(t, rt)
        }, EVENTS_EARLY_HOLD_MS)
        rt.gapTimer.unref?.()
      }, EVENTS_GAP_SYNC_DELAY_MS)
      rt.gapTimer.unref?.()
    }
    return true
  }

  /** Let go of a run's events held early whose gap was not filled in time (the tail sync fetches them again). */
  private letGoEarly (t: CorrTrack, rt: RunTrack): void {
    if (rt.early === undefined) return
    for (const held of rt.early.values()) {
      t.earlyCount--
      t.earlyBytes -= held.bytes
      this.i.stats.earlyDropped++
    }
    rt.early = undefined
  }

  /** The run's head moved: place the early event that follows it (which places the next), and drop those now behind it. */
  private placeEarly (t: CorrTrack, rt: RunTrack, accepted: AgentEvent[]): void {
    if (rt.early === undefined || rt.head === undefined) return
    const head = rt.head.seq
    let next: AgentEvent | undefined
    for (const [seq, held] of rt.early) {
      if (seq > head + 1) continue
      rt.early.delete(seq)
      t.earlyCount--
      t.earlyBytes -= held.bytes
      if (seq === head + 1) next = held.event
    }
    if (rt.early.size === 0) {
      rt.early = undefined
      clearTimeout(rt.gapTimer)
      rt.gapTimer = undefined
    }
    // a fork or a forgery held early is judged here like any other event, and dropped
    if (next !== undefined) this.placeOne(t, next, accepted)
  }

  /**
   * The run's executor signed its own event where the delegator's liveness
   * verdict is held (it ended or moved the run before it heard of the
   * verdict): the executor's log is the run's, so its event takes the
   * verdict's place, for the copy and the subscribers alike.
   */
  private supersede (t: CorrTrack, rt: RunTrack, e: AgentEvent, accepted: AgentEvent[]): Verdict {
    rt.head = e
    rt.headHash = undefined
    rt.state = stateAfter(e)
    accepted.push(e)
    t.placed++
    remember(t, e)
    this.i.stats.superseded++
    this.i.log.info({ run_id: e.run_id, seq: e.seq }, 'the executor\'s own event replaces a liveness verdict held here')
    for (const s of t.subs) s.supersede(e)
    this.learn(t, e)
    // what waited on the run's own last word (a successor its handoff names, or one its end names nobody) has it now
    if (endsRun(e)) this.wake(t, e.run_id, accepted)
    // and the executor's events held after the verdict follow it
    this.placeEarly(t, rt, accepted)
    return 'accepted'
  }

  /** Judge again the runs whose start waits on `runId`, placing those now admitted. */
  private wake (t: CorrTrack, runId: string, accepted: AgentEvent[]): void {
    for (const waiting of this.i.correlations.waitingOn(t, runId)) {
      const held = waiting.heldStart
      if (held === undefined) continue
      waiting.lineage = 'unknown'
      waiting.heldStart = undefined
      if (waiting.local) {
        // a run this node executes: stored already, only its delivery waited; what waits on it in turn (its
        // children's starts, a successor its handoff names) is judged now: its own seq 1 and end were applied
        // while it was pending and do not come again (placed events go to `accepted`, its own are in the log)
        if (this.i.correlations.judge(t, waiting, held) !== 'admitted') continue
        this.i.deliverHeld(t, waiting)
        this.wake(t, waiting.run_id, accepted)
        continue
      }
      if (this.placeOne(t, held, accepted) === 'accepted') this.i.syncer().fetch(t, waiting)
    }
  }

  /** Runs read from the log were admitted after a load: place what waited on them, on the lock. */
  settled (t: CorrTrack, runId: string): void {
    void t.lock.run(async () => {
      const accepted: AgentEvent[] = []
      this.wake(t, runId, accepted)
      await this.i.copies.persist(t, accepted)
      this.afterIngest(t, accepted, 'sync')
    }).catch((err: unknown) => {
      this.i.log.warn({ err, correlation_id: t.id, run_id: runId }, 'runs waiting on an admitted run could not be placed')
    })
  }

  /** Sync results: verified and chain-checked by the sync client, placed like gossip. */
  async ingest (t: CorrTrack, events: AgentEvent[]): Promise<AgentEvent[]> {
    const { accepted } = await this.placeQueued(t, events)
    // early gossip events placed behind them are not the sync's
    const fetched = new Set(events)
    for (const e of accepted) if (fetched.has(e)) this.i.stats.synced++
    this.afterIngest(t, accepted, 'sync')
    return accepted
  }

  private afterIngest (t: CorrTrack, accepted: AgentEvent[], via: 'gossip' | 'sync'): void {
    if (accepted.length === 0) return
    // something moved: look again soon when gossip missed it or the node waits on runs it delegated; a
    // follower that gossip serves looks again later (EVENTS_TAIL_SYNC_FOLLOW_MS), or every follower
    // would poll the executor after every event of a slow run
    t.tailDelay = via === 'sync' || t.delegated.size > 0 ? EVENTS_TAIL_SYNC_MIN_MS : EVENTS_TAIL_SYNC_FOLLOW_MS
    this.i.syncer().refresh(t)
    this.i.correlations.maybeUntrack(t)
  }

  /** What an event teaches about the correlation: who takes part, which runs follow. */
  learn (t: CorrTrack, e: AgentEvent): void {
    const correlations = this.i.correlations
    for (const p of participantsOf(e)) correlations.addParticipant(t, p)
    const from = t.runs.get(e.run_id)
    for (const l of linkedRunsOf(e)) {
      if (executorOfRun(l.run_id) !== l.agent_id) continue
      const known = t.runs.get(l.run_id)
      const rt = known ?? correlations.newRunTrack(t, l.run_id, false)
      if (rt === undefined) continue
      // the successor (or predecessor) of a run this node follows is followed too
      if (from?.interest === true) rt.interest = true
      if (known === undefined && !rt.local) this.i.syncer().fetch(t, rt)
    }
  }

  /**
   * A liveness verdict this node signed as a run's delegator: placed here
   * like an event fetched by sync (stored, handed to subscribers), then
   * published on the correlation's topic if it was. Returns whether it was placed.
   */
  async placeVerdict (t: CorrTrack, verdict: AgentEvent): Promise<boolean> {
    const accepted = await this.ingest(t, [verdict])
    // only what this node's own placement took: every peer would refuse the rest (found by session 57's review)
    if (accepted.length > 0) this.publish(t, verdict, 'a verdict')
    return accepted.length > 0
  }

  /** Publish events of another node's run again (the executor's events that replaced a verdict here). */
  republish (t: CorrTrack, events: AgentEvent[]): void {
    for (const e of events) this.publish(t, e, 'an event published again')
  }

  /**
   * Publish one event on its correlation's topic, unless no connected peer
   * takes the topic: flood publish would reach nobody, and one who subscribes
   * later syncs the event from a log (counted as `unpublished`). A publish
   * that fails (the router is stopping, the subscribers left meanwhile) is
   * logged; they sync it too.
   */
  private publish (t: CorrTrack, event: AgentEvent, what: string): void {
    const pubsub = this.i.host.services.pubsub
    if (pubsub.getSubscribers(t.topic).length === 0) {
      this.i.stats.unpublished++
      return
    }
    this.i.stats.published++
    pubsub.publish(t.topic, enc.encode(canonicalEvent(event))).catch((err: unknown) => {
      this.i.log.debug({ err, run_id: event.run_id, seq: event.seq }, `${what} was not published on gossip (subscribers sync it)`)
    })
  }

  /**
   * The executor's side: publish an event this node committed for a run it
   * executes. The executor publishes without joining the topic: flood publish
   * reaches every peer known to subscribe, joined or not, and a join would
   * cost a SUBSCRIBE to every connected peer plus a GRAFT exchange with every
   * subscriber, just as the first event goes out. It joins only when it
   * follows the correlation for another reason (a subscriber, a run it
   * delegated).
   */
  onLocalEvent (event: AgentEvent, run: Run): void {
    if (!this.i.running()) return
    const t = this.i.correlations.ensure(event.correlation_id, false, false)
    // a delegator that follows its run sends its SUBSCRIBE ahead of the delegate request, so it is counted here
    this.publish(t, event, 'an event')
    // in order with what waits on the correlation's lock, within its bound (local-events.ts)
    this.local.take(t, event, run.state)
  }

  /** Take an event of this node's own run into its track (`state`: the run's after it); in order, see onLocalEvent. */
  private applyLocal (t: CorrTrack, event: AgentEvent, state: RunState): void {
    const correlations = this.i.correlations
    const rt = correlations.newRunTrack(t, event.run_id, true)
    if (rt === undefined) return
    rt.local = true
    rt.headLoaded = true
    if (event.seq === 1) t.logRuns?.add(event.run_id)
    if (rt.head !== undefined && event.seq <= rt.head.seq) return
    rt.head = event
    rt.headHash = undefined
    rt.state = state
    if (event.seq === 1 && rt.lineage === 'unknown') correlations.judge(t, rt, event)
    // a run of this node's is in its log whatever its place; subscribers see it only once admitted, and not
    // ahead of its log read queued when it was (held-delivery.ts), which hands them this event too
    if (rt.lineage === 'admitted' && rt.heldDelivery !== true) for (const s of t.subs) s.deliver(event)
    this.learn(t, event)
    if (rt.lineage === 'admitted' && (event.seq === 1 || endsRun(event))) {
      const accepted: AgentEvent[] = []
      this.wake(t, event.run_id, accepted)
      void this.i.copies.store(t, accepted)
    }
  }
}
