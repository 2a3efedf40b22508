/**
 * What every check works with: the kit's four nodes, the target, and a
 * scope per check that makes the requests (raw frames, see wire.ts), waits
 * on runs by reading their events back over /aap/events/0.1.0, and keeps the
 * evidence (run ids, event seqs, error frames) the report shows.
 */
import type { CapabilityRef } from '../card/card.ts'
import { peerIdFromString } from '@libp2p/peer-id'
import type { PeerId, PrivateKey } from '@libp2p/interface'
import { CONTROL_PROTOCOL, DELEGATE_PROTOCOL, EVENTS_SYNC_PROTOCOL } from '../constants.ts'
import type { MeshNode } from '../node.ts'
import { isRun } from '../runs/runtime.ts'
import type { AgentEvent, Run } from '../runlog/types.ts'
import { checkChain, SignatureCache, verifyEventSync } from '../runlog/event.ts'
import { isSyncResponse } from '../events/sync.ts'
import {
  CONFORMANCE_CAPABILITY, KIT_CALL_TIMEOUT_MS, KIT_DIAL_TIMEOUT_MS, KIT_MAX_EVENT_BYTES_KEPT,
  KIT_MAX_EVENT_BYTES_PER_READ, KIT_MAX_SYNC_PAGES, KIT_POLL_INTERVAL_MS, KIT_RUN_ANSWERS_MAX, KIT_RUNS_PER_DELEGATOR_NEEDED, KIT_WAIT_TIMEOUT_MS
} from './constants.ts'
import { rawCall, type Frame, type RawCallOptions } from '../wire/raw.ts'
import { CapacityRefusal, capacityMessage, CheckFailure, errorText, isCapacityRefusal, pastPageBound, short, type Evidence } from './outcomes.ts'
import { EarlierEvents, type EarlierEvent, type EarlierPending } from './earlier-events.ts'

export {
  CapacityRefusal, capacityMessage, CheckFailure, clean, errorText, expect, isCapacityRefusal, pastPageBound, Undecided, type Evidence
} from './outcomes.ts'

/** An event as the target served it: nothing about it is trusted. */
export interface WireEvent {
  run_id?: unknown
  correlation_id?: unknown
  type?: unknown
  seq?: unknown
  payload?: Record<string, unknown>
  [k: string]: unknown
}

export interface KitNodes {
  /** Delegates the work (the HACP side's agent). */
  delegator: MeshNode
  /** The L2 coordinator: authorized on the runs, raises and resolves checkpoints. */
  coordinator: MeshNode
  /** Receives handoffs and subdelegations; runs the conformance agent itself. */
  receiver: MeshNode
  /** A bystander: reads runs and events as an auditor, tries what it may not; its handoff protocol stalls. */
  bystander: MeshNode
  /** The receiver's private key: the kit signs crafted handoff frames as the executor of the receiver's runs. */
  receiverKey?: PrivateKey
  /** The bystander's private key: it signs the tickets of forged handoff frames (forged-handoff). */
  bystanderKey?: PrivateKey
}

const TERMINAL = new Set(['run.completed', 'run.failed'])

/** Verified events, handed to checks that treat every event as the target's word. */
function asWire (events: AgentEvent[]): WireEvent[] {
  return events as unknown as WireEvent[]
}

/** One Run the target answered: to which request (`what`), and the correlation the run must carry as the kit knew it then. */
export interface RunAnswer {
  run: Run
  expected: string
  what?: string
}

/** A task a check saw refused and read back without a run: no run may appear for it later (the no-late-runs check). */
export interface NoRunExpected {
  /** The check that saw the refusal: it fails too if a run appears later. */
  check: string
  correlation: string
  what: string
  /** Runs of the task that existed before the refused request (a parent run), not counted. */
  allowed: string[]
  /** When the empty read was made (ms since the epoch). */
  at: number
}

export function executorOf (runId: string): PeerId {
  return peerIdFromString(runId.split(':')[0] ?? '')
}

export class Kit {
  readonly nodes: KitNodes
  readonly target: string
  readonly targetPeer: PeerId
  readonly nonce: string
  /** The last Run the target answered for each run, with the correlation it must carry. */
  readonly handles = new Map<string, RunAnswer>()
  /**
   * Every Run the target answered (delegate, block, resume, cancel, handoff,
   * get_run), in order, each that differs from the one before it of the same
   * run: the checks over everything judge each one, not only the last
   * (at most KIT_RUN_ANSWERS_MAX).
   */
  readonly answers: RunAnswer[] = []
  /** The events of each run's last read, by run id, in seq order. */
  readonly events = new Map<string, WireEvent[]>()
  /** Events a read showed that the last read of their run does not hold (an earlier read, a read of the task): judged with `events`. */
  readonly earlier = new EarlierEvents()
  /** Correlation each run must carry, as the kit knows it from its own requests. */
  readonly expected = new Map<string, string>()
  /** Bytes of each run's events in `events`, bounded by KIT_MAX_EVENT_BYTES_KEPT together with `earlier`. */
  readonly eventBytes = new Map<string, number>()
  /** The target's own addresses (multiaddrs) as the kit dialed them: none may reach a Run or an event. */
  targetAddrs: string[] = []
  /** The kit's own signature cache: nothing the target's process verified is taken on trust. */
  readonly signatures = new SignatureCache()
  /** Delegations the target refused for capacity, over every check. */
  capacityRefusals = 0
  /** Every run the kit learned of (tracked, handed, or found reading a correlation), with the correlation it was found under. */
  readonly known = new Map<string, string | undefined>()
  /** Tasks that must stay without a run; read again once every other check is done. */
  readonly noRun: NoRunExpected[] = []
  /** Checks found wrong after they ended (a run appeared for a task they saw refused): check id -> what was found. */
  readonly lateFailures = new Map<string, string[]>()
  /** Runs whose cancel the target accepted (over every check): each must end failed, its log with run.failed (run-logs). */
  readonly canceled = new Set<string>()
  /** Runs the target took over from a kit node's run (handoff-receive, subdelegation-accepted), with what its per-task replay showed: replay-taken judges them. */
  readonly taken: Array<{ check: string, run: string, task: string, problem: string | null, events: WireEvent[] }> = []

  constructor (nodes: KitNodes, target: string) {
    this.nodes = nodes
    this.target = target
    this.targetPeer = peerIdFromString(target)
    this.nonce = Math.random().toString(36).slice(2, 10)
  }

  task (name: string): string {
    return `conf-${this.nonce}-${name}`
  }

  /** The scope of one check; `checkId` names the check in what is found about it later. */
  scope (checkId = 'kit'): Scope {
    return new Scope(this, checkId)
  }

  /** Every event the target served the kit: each run's last read, then what earlier reads and reads of tasks showed that it does not hold. */
  eventsRead (): EarlierEvent[] {
    const last = [...this.events].flatMap(([runId, events]) => events.map(event => ({ runId, event, what: `the last read of ${runId}`, over: 'run' as const })))
    return [...last, ...this.earlier.unheld(this.events)]
  }

  /** A run the kit learned of; the first correlation it was found under is kept. */
  learn (runId: string, correlation?: string): void {
    if (this.known.get(runId) === undefined) this.known.set(runId, correlation)
  }
}

/**
 * A raw call's options. `cleanup`: a cancel made when the check is done with a
 * run, sent even when the check was stopped; `probe`: a request any answer
 * satisfies. An error frame of either is no evidence of the check (a refusal
 * of a cleanup is noted where it matters).
 */
export type KitCallOptions = RawCallOptions & { cleanup?: true, probe?: true }

/** One check's view of the kit: every request and read goes through it and leaves evidence. */
export class Scope {
  readonly kit: Kit
  readonly checkId: string
  readonly evidence: Evidence = { runs: [], events: [], frames: [], notes: [] }
  /** Runs of the target this check created, with the node that delegated each: canceled when the check ends. */
  readonly created = new Map<string, MeshNode>()
  private closed = false
  /** Set once the check ran out of time: it makes no request and waits for nothing more. */
  private stopped: Error | undefined

  constructor (kit: Kit, checkId: string) {
    this.kit = kit
    this.checkId = checkId
  }

  get n (): KitNodes {
    return this.kit.nodes
  }

  /** The check ran out of time (runner.ts): its next request or wait throws instead. */
  stop (why: Error): void {
    this.stopped = why
  }

  /** Throws once the check was stopped; every request and wait of the check goes through here. */
  live (): void {
    if (this.stopped !== undefined) throw new CheckFailure(`stopped: ${this.stopped.message}`)
  }

  note (text: string): void {
    this.evidence.notes.push(short(text))
  }

  private noteRun (runId: string): void {
    if (!this.evidence.runs.includes(runId)) this.evidence.runs.push(runId)
  }

  /** One raw request: its dial bounded by KIT_DIAL_TIMEOUT_MS, its answer by KIT_CALL_TIMEOUT_MS unless `opts` says otherwise. */
  async call (from: MeshNode, protocol: string, type: string, body: unknown, opts?: KitCallOptions, peer: PeerId = this.kit.targetPeer): Promise<Frame> {
    // the cleanup of a stopped check still cancels its runs
    const { cleanup, probe, ...raw } = opts ?? {}
    if (cleanup !== true) this.live()
    const frame = await rawCall(from.host, peer, protocol, type, body, { timeoutMs: KIT_CALL_TIMEOUT_MS, dialTimeoutMs: KIT_DIAL_TIMEOUT_MS, ...raw })
    if (!frame.ok && cleanup !== true && probe !== true) this.evidence.frames.push(short({ request: type, error: frame.error }))
    return frame
  }

  /** The target refused a run for capacity: counted, and the check ends undecided. */
  refusedForCapacity (what: string, said: string): never {
    this.kit.capacityRefusals++
    throw new CapacityRefusal(capacityMessage(what, said))
  }

  /** A check over everything found nothing to judge: undecided when capacity refusals are why, else a failure. */
  nothingSeen (what: string): never {
    if (this.kit.capacityRefusals > 0) {
      throw new CapacityRefusal(`${what}: ${this.kit.capacityRefusals} delegation(s) were refused for capacity; the kit needs ${KIT_RUNS_PER_DELEGATOR_NEEDED} concurrent runs per delegator`)
    }
    throw new CheckFailure(what)
  }

  /** A run of the target this check made: it is canceled when the check ends (at once if it already has). */
  async track (runId: string, delegator: MeshNode): Promise<void> {
    this.created.set(runId, delegator)
    this.kit.learn(runId, this.kit.expected.get(runId))
    if (this.closed) await this.cancelCreated()
  }

  /**
   * End every run this check created that is not known to have ended, so a
   * check that failed half way holds none of the target's slots for the next
   * one. Refusals are noted (a run that ended meanwhile is INVALID_TRANSITION).
   */
  async close (): Promise<void> {
    this.closed = true
    await this.cancelCreated()
  }

  private async cancelCreated (): Promise<void> {
    // a run whose cancel the target accepted has ended: it is not canceled twice
    const open = [...this.created].filter(([runId]) => !this.kit.canceled.has(runId) && !TERMINAL.has(String(this.kit.events.get(runId)?.at(-1)?.type)))
    this.created.clear()
    await Promise.all(open.map(async ([runId, from]) => {
      try {
        const f = await this.control(from, 'cancel', { run_id: runId, reason: 'conformance check done' }, { cleanup: true })
        if (!f.ok && f.error?.code !== 'INVALID_TRANSITION') this.note(`cleanup: cancel of ${runId} answered ${errorText(f)}`)
      } catch (err) {
        this.note(`cleanup: cancel of ${runId} got no answer: ${(err as Error).message}`)
      }
    }))
  }

  /** A delegate request to the target (by default from the delegator, the conformance capability, coordinator authorized). */
  async delegate (name: string, input: Record<string, unknown>, o: {
    from?: MeshNode, capability?: unknown, toAgent?: string, parentRun?: string | null, authorized?: string[], opts?: RawCallOptions
  } = {}): Promise<Frame> {
    const taskId = this.kit.task(name)
    const from = o.from ?? this.n.delegator
    const body = {
      to_agent: o.toAgent ?? this.kit.target,
      task_id: taskId,
      capability: o.capability ?? CONFORMANCE_CAPABILITY,
      input,
      parent_run: o.parentRun ?? null,
      authorized: o.authorized ?? [this.n.coordinator.agentId]
    }
    // the delegator's signed ticket (protocols/lineage.md), the way every delegator of this mesh sends it
    const ticket = await from.runs.ticketFor({ ...body, capability: body.capability as CapabilityRef })
    const frame = await this.call(from, DELEGATE_PROTOCOL, 'delegate', { ...body, ticket }, o.opts)
    // the correlation this run must carry is the task the kit sent, whatever the handle says
    const runId = (frame.body?.run as { run_id?: unknown } | undefined)?.run_id
    if (frame.ok && typeof runId === 'string') this.kit.expected.set(runId, taskId)
    if (frame.ok) await this.track(this.runOf(frame, `delegate ${name}`).run_id, from)
    if (!frame.ok && isCapacityRefusal(frame.error?.code, frame.error?.details)) this.refusedForCapacity(`delegate ${name}`, errorText(frame))
    return frame
  }

  /** A control request about a run, to its executor. */
  async control (from: MeshNode, type: string, body: Record<string, unknown>, opts?: KitCallOptions): Promise<Frame> {
    const runId = String(body.run_id)
    let peer = this.kit.targetPeer
    try { peer = executorOf(runId) } catch { this.note(`run id ${runId} names no executor: asked the target`) }
    const frame = await this.call(from, CONTROL_PROTOCOL, type, body, opts, peer)
    if (type === 'cancel' && frame.ok) this.kit.canceled.add(runId)
    return frame
  }

  /** The run of a success frame (schema-checked); fails the check on an error frame. */
  runOf (frame: Frame, what: string): Run {
    if (!frame.ok) throw new CheckFailure(`${what}: expected success, got ${errorText(frame)}`)
    const run = frame.body?.run
    if (!isRun(run)) throw new CheckFailure(`${what}: the answer is not a Run: ${short(run)}`)
    return this.answered(run, what)
  }

  /**
   * A Run the target answered (through runOf, or through aap-mesh's own
   * client, which checked its schema): kept, as every answer is, for the
   * checks over everything (runs-correlation, no-endpoint-upward).
   */
  answered (run: Run, what: string): Run {
    this.noteRun(run.run_id)
    this.kit.learn(run.run_id, this.kit.expected.get(run.run_id))
    const known = this.kit.handles.get(run.run_id)
    const answer: RunAnswer = { run, expected: this.kit.expected.get(run.run_id) ?? known?.expected ?? this.kit.known.get(run.run_id) ?? run.correlation_id, what }
    // an answer like the one before it of the same run adds nothing to judge
    if (known === undefined || JSON.stringify(known.run) !== JSON.stringify(run)) {
      if (this.kit.answers.length >= KIT_RUN_ANSWERS_MAX) throw new CheckFailure(`${what}: the kit would keep more than ${KIT_RUN_ANSWERS_MAX} Run answers of the target (KIT_RUN_ANSWERS_MAX)`)
      this.kit.answers.push(answer)
    }
    this.kit.handles.set(run.run_id, answer)
    return run
  }

  /** Fails the check unless the frame is an error with `code` (or one of the codes listed). */
  expectError (frame: Frame, code: string | readonly string[], what: string): void {
    const codes: readonly string[] = typeof code === 'string' ? [code] : code
    if (frame.ok) {
      // the answer that should have been refused is the evidence
      this.evidence.frames.push(short({ request: what, ok: true, body: frame.body }))
      throw new CheckFailure(`${what}: expected ${codes.join(' or ')}, but it succeeded`)
    }
    if (!codes.includes(String(frame.error?.code))) throw new CheckFailure(`${what}: expected ${codes.join(' or ')}, got ${errorText(frame)}`)
  }

  async getRun (runId: string, from: MeshNode = this.n.bystander): Promise<Run> {
    return this.runOf(await this.control(from, 'get_run', { run_id: runId }), `get_run ${runId}`)
  }

  /**
   * One sync page, taken as aap-mesh's own sync client takes it: a
   * SyncResponse (every event an AgentEvent), each event signed by the
   * executor its run id names, within the read's byte budget. A bad page
   * fails the check with the record as evidence.
   */
  private syncPage (frame: Frame, what: string, read: { bytes: number }): AgentEvent[] {
    if (!frame.ok) throw new CheckFailure(`${what}: ${errorText(frame)}`)
    read.bytes += Buffer.byteLength(JSON.stringify(frame.body ?? null))
    if (read.bytes > KIT_MAX_EVENT_BYTES_PER_READ) throw new CheckFailure(`${what}: the target served more than ${KIT_MAX_EVENT_BYTES_PER_READ} bytes of events (KIT_MAX_EVENT_BYTES_PER_READ)`)
    try {
      const page = isSyncResponse.assert(frame.body, 'the sync page')
      for (const e of page.events) verifyEventSync(e, this.kit.signatures)
      return page.events
    } catch (err) {
      const events = Array.isArray(frame.body?.events) ? frame.body.events as unknown[] : []
      const bad = events.find(e => { try { verifyEventSync(e, this.kit.signatures); return false } catch { return true } })
      if (bad !== undefined) this.evidence.events.push(short({ record: bad }))
      throw new CheckFailure(`${what}: the target served a record that is not a signed AgentEvent: ${short((err as Error).message)}`)
    }
  }

  /** Events of `events` chain on from `head` (seq, prev hash, one run and correlation), or the check fails. */
  private chained (events: AgentEvent[], head: AgentEvent | undefined, what: string): void {
    try {
      checkChain(events, head)
    } catch (err) {
      throw new CheckFailure(`${what}: the events do not chain: ${short((err as Error).message)}`)
    }
  }

  /**
   * Keep what was read of a run as its last read, and what its read before
   * showed that this one does not hold (kit.earlier), within
   * KIT_MAX_EVENT_BYTES_KEPT over every run.
   */
  private keep (runId: string, events: WireEvent[], bytes: number): void {
    const replaced = this.kit.earlier.pending(runId, this.kit.events.get(runId) ?? [], events, `a read of ${runId} a later read replaced`, 'run')
    this.withinKept(`events of ${runId}`, bytes + replaced.bytes, runId)
    this.kit.earlier.keep(replaced)
    this.kit.events.set(runId, events)
    this.kit.eventBytes.set(runId, bytes)
  }

  /** Fails the check when `more` bytes (in place of the last read of `runId`, if named) would take the events the kit holds past KIT_MAX_EVENT_BYTES_KEPT. */
  private withinKept (what: string, more: number, runId?: string): void {
    let total = more + this.kit.earlier.bytes
    for (const [id, n] of this.kit.eventBytes) if (id !== runId) total += n
    if (total > KIT_MAX_EVENT_BYTES_KEPT) throw new CheckFailure(`${what}: the kit would hold more than ${KIT_MAX_EVENT_BYTES_KEPT} bytes of the target's events (KIT_MAX_EVENT_BYTES_KEPT)`)
  }

  /** Events of a read of a task the last read of their run does not hold: kept for the checks over everything (kit.earlier). */
  private keepOfTask (correlationId: string, events: WireEvent[]): void {
    const what = `a read of task ${correlationId}`
    const byRun = new Map<string, WireEvent[]>()
    for (const e of events) byRun.get(String(e.run_id))?.push(e) ?? byRun.set(String(e.run_id), [e])
    const pending: EarlierPending[] = [...byRun].map(([runId, read]) => this.kit.earlier.pending(runId, read, this.kit.events.get(runId) ?? [], what, 'correlation'))
    this.withinKept(what, pending.reduce((n, p) => n + p.bytes, 0))
    for (const p of pending) this.kit.earlier.keep(p)
  }

  /** Every event of a run its executor serves (read by the bystander, as an auditor would), verified and chained from seq 1. */
  async readEvents (runId: string): Promise<WireEvent[]> {
    const out: AgentEvent[] = []
    const read = { bytes: 0 }
    const what = `events of ${runId}`
    let more = false
    this.noteRun(runId)
    for (let page = 0; page < KIT_MAX_SYNC_PAGES; page++) {
      const frame = await this.call(this.n.bystander, EVENTS_SYNC_PROTOCOL, 'run', { run_id: runId, after_seq: out.at(-1)?.seq ?? 0 }, undefined, executorOf(runId))
      let events: AgentEvent[]
      try {
        events = this.syncPage(frame, what, read)
      } catch (err) {
        // what the target served stays for the checks over everything (events-correlation judges a record without correlation_id too)
        const served = Array.isArray(frame.body?.events) ? frame.body.events as WireEvent[] : []
        if (served.length > 0 && read.bytes <= KIT_MAX_EVENT_BYTES_PER_READ) {
          try { this.keep(runId, [...asWire(out), ...served], read.bytes) } catch (e) { this.note(`not kept: ${(e as Error).message}`) }
        }
        throw err
      }
      const other = events.find(e => e.run_id !== runId)
      if (other !== undefined) throw new CheckFailure(`${what}: the target answered with an event of run ${short(other.run_id)}`)
      this.chained(events, out.at(-1), what)
      out.push(...events)
      more = frame.body?.more === true
      if (!more) break
      if (events.length === 0) throw new CheckFailure(`${what}: the target claims more events but sent none`)
    }
    if (more) {
      // what was read stays for the checks over everything, as with a bad page
      try { this.keep(runId, asWire(out), read.bytes) } catch (e) { this.note(`not kept: ${(e as Error).message}`) }
      throw pastPageBound(what)
    }
    this.keep(runId, asWire(out), read.bytes)
    return asWire(out)
  }

  /** Every event of a correlation one agent serves, verified, each run's chained from seq 1. */
  async readCorrelation (correlationId: string, from: PeerId = this.kit.targetPeer): Promise<WireEvent[]> {
    const out: AgentEvent[] = []
    const read = { bytes: 0 }
    const what = `events of correlation ${correlationId}`
    let cursor: Record<string, unknown> = {}
    let more = false
    for (let page = 0; page < KIT_MAX_SYNC_PAGES; page++) {
      const frame = await this.call(this.n.bystander, EVENTS_SYNC_PROTOCOL, 'correlation', { correlation_id: correlationId, ...cursor }, undefined, from)
      const events = this.syncPage(frame, what, read)
      for (const e of events) {
        if (e.correlation_id !== correlationId) throw new CheckFailure(`${what}: the target answered with an event of correlation ${short(e.correlation_id)}`)
        const last = out.at(-1)
        if (last !== undefined && e.run_id < last.run_id) throw new CheckFailure(`${what}: runs out of order (${e.run_id} after ${last.run_id})`)
        this.chained([e], last?.run_id === e.run_id ? last : undefined, what)
        this.kit.learn(e.run_id, correlationId)
        out.push(e)
      }
      const last = events.at(-1)
      more = frame.body?.more === true
      if (!more) break
      if (last === undefined) throw new CheckFailure(`${what}: the target claims more events but sent none`)
      cursor = { after_run: last.run_id, after_seq: last.seq }
    }
    if (more) throw pastPageBound(what)
    this.keepOfTask(correlationId, asWire(out))
    return asWire(out)
  }

  /**
   * A refused request must have created no run for `correlationId` (runs in
   * `allowed` existed before it): read at once, and again at the end of the
   * kit run (no-late-runs), since a target may create the run a moment after
   * its refusal.
   */
  async expectNoRun (correlationId: string, what: string, allowed: readonly string[] = []): Promise<void> {
    const events = await this.readCorrelation(correlationId)
    const runs = [...new Set(events.map(e => String(e.run_id)))].filter(r => !allowed.includes(r))
    if (runs.length > 0) {
      for (const r of runs) this.cite(r, events.filter(e => e.run_id === r))
      throw new CheckFailure(`${what}: created ${runs.length} run(s) for ${correlationId} (${events.length} event(s)): ${runs.map(r => short(r)).join(', ')}`)
    }
    this.kit.noRun.push({ check: this.checkId, correlation: correlationId, what, allowed: [...allowed], at: Date.now() })
  }

  /** Read the run's events until one matches (bounded); the match is kept as evidence. */
  async waitEvent (runId: string, match: (e: WireEvent) => boolean, what: string, timeoutMs = KIT_WAIT_TIMEOUT_MS): Promise<WireEvent> {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const found = (await this.readEvents(runId)).find(match)
      if (found !== undefined) {
        this.evidence.events.push(`${runId.slice(-8)}#${String(found.seq)} ${String(found.type)}`)
        return found
      }
      if (Date.now() > deadline) throw new CheckFailure(`${what}: not seen on run ${runId} within ${timeoutMs} ms`)
      await new Promise(resolve => setTimeout(resolve, KIT_POLL_INTERVAL_MS))
      this.live()
    }
  }

  /** The run's last event is of `type` (its state changed), read back. */
  async waitType (runId: string, type: string): Promise<WireEvent> {
    return this.waitEvent(runId, e => e.type === type, type)
  }

  /** Keep events as evidence: `<run tail>#<seq> <type>`. */
  cite (runId: string, events: ReadonlyArray<{ seq?: unknown, type?: unknown }>): void {
    for (const e of events) this.evidence.events.push(`${runId.slice(-8)}#${String(e.seq)} ${String(e.type)}`)
  }
}
