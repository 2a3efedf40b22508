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
import { EVENTS_MAX_EVENTS_PER_RUN, EVENTS_TAIL_SYNC_MIN_MS, EVENT_MAX_BYTES } from '../constants.ts'
import type { Logger } from '../logger.ts'
import { executorOfRun, verifyEventSync } from '../runlog/event.ts'
import type { AgentEvent, Run } from '../runlog/types.ts'
import type { MeshHost } from '../wire/host.ts'
import type { CopyStore } from './copies.ts'
import { linkedRunsOf, participantsOf, stateAfter } from './replay.ts'
import type { Syncer } from './syncer.ts'
import type { TopicValidator } from './membership.ts'
import { VERDICT_RESULT, type CorrTrack, type EventsStats, type Verdict } from './track.ts'
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
}

export class Placement {
  private readonly i: PlacementInit

  constructor (init: PlacementInit) {
    this.i = init
  }

  count (v: Verdict): Verdict {
    this.i.stats.gossip[v]++
    return v
  }

  /** The validator of a correlation's topic. */
  validator (t: CorrTrack): TopicValidator {
    return (_peer: PeerId, msg: Message) => {
      const v = this.judge(t, msg)
      return typeof v === 'string' ? VERDICT_RESULT[v] : v.then(x => VERDICT_RESULT[x])
    }
  }

  /**
   * Decode, verify, then place a gossiped event in its run's chain.
   * Synchronous when nothing is queued on the correlation and the run's head
   * is known (the usual case), else queued.
   */
  judge (t: CorrTrack, msg: Message): Verdict | Promise<Verdict> {
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
    if (executorOfRun(event.run_id) === this.i.agentId) return this.count('own_run')
    if (t.lock.busy === 0 && this.ready(t, [event])) {
      const placed = this.placeNow(t, [event])
      void this.i.copies.store(t, placed.accepted)
      this.afterIngest(t, placed.accepted)
      return this.count(placed.first)
    }
    return this.placeQueued(t, [event]).then((placed) => {
      this.afterIngest(t, placed.accepted)
      return this.count(placed.first)
    }, (err: unknown) => {
      // not stored here (see CopyStore): gossip does not penalise the sender, sync fetches it again
      this.i.log.warn({ err, correlation_id: t.id }, 'a gossiped event could not be placed')
      return this.count('gap')
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

  /** Load what placing `events` needs, then place and store them; on the correlation's lock. */
  private async placeQueued (t: CorrTrack, events: AgentEvent[]): Promise<{ first: Verdict, accepted: AgentEvent[] }> {
    return t.lock.run(async () => {
      for (const runId of new Set(events.map(e => e.run_id))) await this.i.correlations.runTrack(t, runId)
      const placed = this.placeNow(t, events)
      await this.i.copies.persist(t, placed.accepted)
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
      const rt = this.i.correlations.newRunTrack(t, e.run_id, false)
      if (rt === undefined) { note('over_limit'); continue }
      if (rt.local) { note('own_run'); continue }
      const headSeq = rt.head?.seq ?? 0
      if (e.seq <= headSeq) { note('duplicate'); continue }
      if (e.seq > headSeq + 1) {
        note(rt.head === undefined ? 'unknown_run' : 'gap')
        this.i.syncer().fetch(t, rt)
        continue
      }
      if (e.seq > EVENTS_MAX_EVENTS_PER_RUN) { note('over_limit'); continue }
      if (e.prev !== this.i.correlations.headHashOf(rt)) { note('conflict'); continue }
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

  /** Sync results: verified and chain-checked by the sync client, placed like gossip. */
  async ingest (t: CorrTrack, events: AgentEvent[]): Promise<AgentEvent[]> {
    const { accepted } = await this.placeQueued(t, events)
    this.i.stats.synced += accepted.length
    this.afterIngest(t, accepted)
    return accepted
  }

  private afterIngest (t: CorrTrack, accepted: AgentEvent[]): void {
    if (accepted.length === 0) return
    // something moved: look again soon
    t.tailDelay = EVENTS_TAIL_SYNC_MIN_MS
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
    const correlations = this.i.correlations
    const t = correlations.ensure(event.correlation_id, false, false)
    this.i.stats.published++
    this.i.host.services.pubsub.publish(t.topic, enc.encode(JSON.stringify(event))).catch((err: unknown) => {
      // nobody to send to yet, or the router is stopping: subscribers sync it from the log
      this.i.log.debug({ err, run_id: event.run_id, seq: event.seq }, 'an event was not published on gossip')
    })
    const apply = (): void => {
      const rt = correlations.newRunTrack(t, event.run_id, true)
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
    if (t.lock.busy === 0) {
      apply()
      correlations.maybeUntrack(t)
    } else {
      void t.lock.run(async () => { apply() }).finally(() => { correlations.maybeUntrack(t) })
    }
  }
}
