/**
 * What every check works with: the kit's four nodes, the target, and a
 * scope per check that makes the requests (raw frames, see wire.ts), waits
 * on runs by reading their events back over /aap/events/0.1.0, and keeps the
 * evidence (run ids, event seqs, error frames) the report shows.
 */
import type { CapabilityRef } from '../card/card.ts'
import { peerIdFromString } from '@libp2p/peer-id'
import type { PeerId } from '@libp2p/interface'
import { CONTROL_PROTOCOL, DELEGATE_PROTOCOL, EVENTS_SYNC_PROTOCOL } from '../constants.ts'
import type { MeshNode } from '../node.ts'
import { isRun } from '../runs/runtime.ts'
import type { Run } from '../runlog/types.ts'
import {
  CONFORMANCE_CAPABILITY, KIT_EVIDENCE_MAX_CHARS, KIT_MAX_SYNC_PAGES, KIT_POLL_INTERVAL_MS, KIT_WAIT_TIMEOUT_MS
} from './constants.ts'
import { rawCall, type Frame, type RawCallOptions } from '../wire/raw.ts'

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
}

/** A check found the target wrong. */
export class CheckFailure extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'CheckFailure'
  }
}

export interface Evidence {
  runs: string[]
  events: string[]
  frames: string[]
  notes: string[]
}

function short (v: unknown): string {
  // JSON.stringify(undefined) is undefined, not a string
  const s = typeof v === 'string' ? v : JSON.stringify(v) ?? String(v)
  return s.length > KIT_EVIDENCE_MAX_CHARS ? `${s.slice(0, KIT_EVIDENCE_MAX_CHARS)}…` : s
}

export function executorOf (runId: string): PeerId {
  return peerIdFromString(runId.split(':')[0] ?? '')
}

export class Kit {
  readonly nodes: KitNodes
  readonly target: string
  readonly targetPeer: PeerId
  readonly nonce: string
  /** Every run handle the kit was given, with the correlation it must carry. */
  readonly handles = new Map<string, { run: Run, expected: string }>()
  /** Every event the kit read, by run id, in seq order. */
  readonly events = new Map<string, WireEvent[]>()
  /** Correlation each run must carry, as the kit knows it from its own requests. */
  readonly expected = new Map<string, string>()

  constructor (nodes: KitNodes, target: string) {
    this.nodes = nodes
    this.target = target
    this.targetPeer = peerIdFromString(target)
    this.nonce = Math.random().toString(36).slice(2, 10)
  }

  task (name: string): string {
    return `conf-${this.nonce}-${name}`
  }

  scope (): Scope {
    return new Scope(this)
  }
}

/** One check's view of the kit: every request and read goes through it and leaves evidence. */
export class Scope {
  readonly kit: Kit
  readonly evidence: Evidence = { runs: [], events: [], frames: [], notes: [] }

  constructor (kit: Kit) {
    this.kit = kit
  }

  get n (): KitNodes {
    return this.kit.nodes
  }

  note (text: string): void {
    this.evidence.notes.push(short(text))
  }

  private noteRun (runId: string): void {
    if (!this.evidence.runs.includes(runId)) this.evidence.runs.push(runId)
  }

  async call (from: MeshNode, protocol: string, type: string, body: unknown, opts?: RawCallOptions, peer: PeerId = this.kit.targetPeer): Promise<Frame> {
    const frame = await rawCall(from.host, peer, protocol, type, body, opts)
    if (!frame.ok) this.evidence.frames.push(short({ request: type, error: frame.error }))
    return frame
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
    if (frame.ok) this.runOf(frame, `delegate ${name}`)
    return frame
  }

  /** A control request about a run, to its executor. */
  async control (from: MeshNode, type: string, body: Record<string, unknown>, opts?: RawCallOptions): Promise<Frame> {
    const runId = String(body.run_id)
    let peer = this.kit.targetPeer
    try { peer = executorOf(runId) } catch { this.note(`run id ${runId} names no executor: asked the target`) }
    return this.call(from, CONTROL_PROTOCOL, type, body, opts, peer)
  }

  /** The run of a success frame (schema-checked); fails the check on an error frame. */
  runOf (frame: Frame, what: string): Run {
    if (!frame.ok) throw new CheckFailure(`${what}: expected success, got ${frame.error?.code ?? '?'}: ${frame.error?.message ?? ''}`)
    const run = frame.body?.run
    if (!isRun(run)) throw new CheckFailure(`${what}: the answer is not a Run: ${short(run)}`)
    this.noteRun(run.run_id)
    const known = this.kit.handles.get(run.run_id)
    this.kit.handles.set(run.run_id, { run, expected: this.kit.expected.get(run.run_id) ?? known?.expected ?? run.correlation_id })
    return run
  }

  /** Fails the check unless the frame is an error with `code`. */
  expectError (frame: Frame, code: string, what: string): void {
    if (frame.ok) {
      // the answer that should have been refused is the evidence
      this.evidence.frames.push(short({ request: what, ok: true, body: frame.body }))
      throw new CheckFailure(`${what}: expected ${code}, but it succeeded`)
    }
    if (frame.error?.code !== code) throw new CheckFailure(`${what}: expected ${code}, got ${frame.error?.code ?? '?'}: ${frame.error?.message ?? ''}`)
  }

  /** Fails the check unless the frame is an error (any code). */
  expectRefused (frame: Frame, what: string): void {
    if (frame.ok) {
      this.evidence.frames.push(short({ request: what, ok: true, body: frame.body }))
      throw new CheckFailure(`${what}: expected a refusal, but it succeeded`)
    }
  }

  async getRun (runId: string, from: MeshNode = this.n.bystander): Promise<Run> {
    return this.runOf(await this.control(from, 'get_run', { run_id: runId }), `get_run ${runId}`)
  }

  /** Every event of a run its executor serves (read by the bystander, as an auditor would). */
  async readEvents (runId: string): Promise<WireEvent[]> {
    const out: WireEvent[] = []
    let after = 0
    for (let page = 0; page < KIT_MAX_SYNC_PAGES; page++) {
      const frame = await this.call(this.n.bystander, EVENTS_SYNC_PROTOCOL, 'run', { run_id: runId, after_seq: after }, undefined, executorOf(runId))
      if (!frame.ok) throw new CheckFailure(`events of ${runId}: ${frame.error?.code ?? '?'}: ${frame.error?.message ?? ''}`)
      const events = Array.isArray(frame.body?.events) ? frame.body.events as WireEvent[] : []
      out.push(...events)
      const last = events.at(-1)
      if (frame.body?.more !== true || last === undefined || typeof last.seq !== 'number') break
      after = last.seq
    }
    this.kit.events.set(runId, out)
    this.noteRun(runId)
    return out
  }

  /** Every event of a correlation one agent serves. */
  async readCorrelation (correlationId: string, from: PeerId = this.kit.targetPeer): Promise<WireEvent[]> {
    const out: WireEvent[] = []
    let cursor: Record<string, unknown> = {}
    for (let page = 0; page < KIT_MAX_SYNC_PAGES; page++) {
      const frame = await this.call(this.n.bystander, EVENTS_SYNC_PROTOCOL, 'correlation', { correlation_id: correlationId, ...cursor }, undefined, from)
      if (!frame.ok) throw new CheckFailure(`events of correlation ${correlationId}: ${frame.error?.code ?? '?'}: ${frame.error?.message ?? ''}`)
      const events = Array.isArray(frame.body?.events) ? frame.body.events as WireEvent[] : []
      out.push(...events)
      const last = events.at(-1)
      if (frame.body?.more !== true || last === undefined) break
      cursor = { after_run: last.run_id, after_seq: last.seq }
    }
    return out
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
    }
  }

  /** The run's last event is of `type` (its state changed), read back. */
  async waitType (runId: string, type: string): Promise<WireEvent> {
    return this.waitEvent(runId, e => e.type === type, type)
  }

  /** Keep events as evidence: `<run tail>#<seq> <type>`. */
  cite (runId: string, events: WireEvent[]): void {
    for (const e of events) this.evidence.events.push(`${runId.slice(-8)}#${String(e.seq)} ${String(e.type)}`)
  }
}

export function expect (cond: boolean, message: string): asserts cond {
  if (!cond) throw new CheckFailure(message)
}
