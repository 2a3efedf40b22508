/**
 * The run service of a node: `agent.delegate`, `agent.block`, `agent.resume`,
 * `agent.handoff` (plus get-run and cancel), both as the caller and as the
 * executing side, over /aap/delegate, /aap/control and /aap/handoff.
 *
 * Authority comes from the Noise-authenticated remote PeerId of each request:
 * the delegator (or an agent it authorized) resumes and cancels; the executor
 * raises blocks and completes; nobody else changes a run. Every transition is
 * committed with its signed event before anything is acknowledged.
 */
import { randomBytes } from 'node:crypto'
import type { PeerId, PrivateKey } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'
import {
  CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL, DELEGATE_MAX_FRAME_BYTES, DELEGATE_PROTOCOL, HANDOFF_MAX_FRAME_BYTES,
  HANDOFF_PROTOCOL, MAX_CONCURRENT_INBOUND_RUNS, PEER_ID_CACHE_MAX_ENTRIES, REASON_MAX_CHARS, RUN_INPUT_MAX_BYTES
} from '../constants.ts'
import { capabilityString, supports, type AgentCard, type CapabilityRef } from '../card/card.ts'
import {
  AapError, AgentNotFoundError, CapabilityNotSupportedError, DelegationRefusedError, InvalidRequestError,
  RunNotFoundError, UnauthorizedError, toAapError
} from '../errors.ts'
import { eventHash, executorOfRun } from '../runlog/event.ts'
import { agentIdOf, peerIdOfAgent } from '../identity/identity.ts'
import { schema } from '../schema/validate.ts'
import { RpcClient, method, serve, type CallContext, type CallOptions } from '../wire/rpc.ts'
import type { MeshHost } from '../wire/host.ts'
import { transition } from './state-machine.ts'
import { EventSigner } from '../runlog/signer.ts'
import { RunStore } from './store.ts'
import { isTerminal, type AgentEvent, type HandoffLink, type Run } from '../runlog/types.ts'
import { type Actor, type RunCommand } from './types.ts'

// ---- public shapes ----------------------------------------------------------------

export interface DelegateRequest {
  to_agent: string
  task_id: string
  capability: CapabilityRef
  input: Record<string, unknown>
  parent_run?: string | null
  /** Retries with the same key return the same run. */
  idempotency_key?: string
  /** Agents allowed to resume or cancel besides the delegator. */
  authorized?: string[]
}

interface WireDelegate {
  to_agent: string
  task_id: string
  capability: CapabilityRef
  input: Record<string, unknown>
  parent_run: string | null
  idempotency_key?: string
  authorized?: string[]
}

interface WireHandoff {
  to_agent: string
  from_run: HandoffLink
  task_id: string
  capability: CapabilityRef
  input: Record<string, unknown>
  context: Record<string, unknown>
  delegator: string
  authorized: string[]
  parent_run: string | null
}

export interface RunContext {
  /** A snapshot of the run when the handler was called. */
  readonly run: Run
  readonly input: Record<string, unknown>
  /** Aborted when the run ends by other means (cancel, handoff, node stop). */
  readonly signal: AbortSignal
  /** Set when this run continues another one after a handoff. */
  readonly handedOff: { from: HandoffLink, context: Record<string, unknown> } | null
  /** Set when the handler is called again for a run that was blocked when the node restarted. */
  readonly restored: { checkpoint_id: string | null, resolution: Record<string, unknown> } | null
  progress: (payload: Record<string, unknown>) => Promise<void>
  /** Block on a checkpoint; resolves with the resolution the delegator resumes with. */
  block: (reason: string, checkpointId: string) => Promise<Record<string, unknown>>
  complete: (output: Record<string, unknown>) => Promise<void>
  fail: (message: string) => Promise<void>
  handoff: (toAgent: string, context: Record<string, unknown>) => Promise<Run>
}

/** Returns the output (completes the run) or nothing (completes with {}); throwing fails the run. */
export type RunHandler = (ctx: RunContext) => Promise<Record<string, unknown> | undefined | void>

/** Decide whether to accept a delegation; return a reason string to refuse. */
export type DelegationPolicy = (req: {
  from: string
  task_id: string
  capability: CapabilityRef
  input: Record<string, unknown>
  /** Aborted when the caller goes away or the request overruns its time. */
  signal: AbortSignal
}) => string | undefined | Promise<string | undefined>

export type RunEventListener = (event: AgentEvent, run: Run) => void

export interface RunsInit {
  host: MeshHost
  privateKey: PrivateKey
  datastore: Datastore
  /** Verified card of an agent (cache, peer, DHT); AGENT_NOT_FOUND when it cannot be had. */
  resolveCard: (agentId: string, opts?: { signal?: AbortSignal }) => Promise<AgentCard>
  /** This node's own card, for the capability check on inbound work. */
  ownCard: () => AgentCard | undefined
  /** Runs (running or blocked) this node executes at once before it refuses more (default MAX_CONCURRENT_INBOUND_RUNS). */
  maxConcurrentInboundRuns?: number
}

const isWireDelegate = schema<WireDelegate>('aap:runs#/definitions/DelegateRequest')
const isWireHandoff = schema<WireHandoff>('aap:runs#/definitions/HandoffRequest')
const isBlock = schema<{ run_id: string, reason: string, checkpoint_id: string }>('aap:runs#/definitions/BlockRequest')
const isResume = schema<{ run_id: string, resolution: Record<string, unknown> }>('aap:runs#/definitions/ResumeRequest')
const isGetRun = schema<{ run_id: string }>('aap:runs#/definitions/GetRunRequest')
const isCancel = schema<{ run_id: string, reason?: string }>('aap:runs#/definitions/CancelRequest')
const isControlHandoff = schema<{ run_id: string, to_agent: string, context: Record<string, unknown> }>('aap:runs#/definitions/ControlHandoffRequest')
export const isRun = schema<Run>('aap:runs#/definitions/Run')

interface Active {
  run: Run
  last?: AgentEvent
  abort: AbortController
  /** Resolves the handler's pending `ctx.block` with the resolution. */
  waiter?: (resolution: Record<string, unknown>) => void
  /** Resolves when a blocked run is resumed (for handler calls made while blocked). */
  resumed?: PromiseWithResolvers<Record<string, unknown>>
  handlerRunning: boolean
  /** The run.started of a run whose handle is not out yet: announced once it is (see announceStart). */
  unannounced?: { event: AgentEvent, run: Run }
}

/** A run created by an inbound request whose handler starts once the answer is out. */
interface PendingStart {
  input: Record<string, unknown>
  handoff: RunContext['handedOff']
  /** The delegator can still learn the handle (it set an idempotency key), so an undelivered answer is not fatal. */
  recoverable: boolean
}

/**
 * Why a handler's signal aborts when its run ends. Built once: an Error
 * captures a stack trace, which every completed run would otherwise pay for.
 */
const RUN_COMPLETED = new AapError('INVALID_TRANSITION', 'run ended: completed')
const RUN_FAILED = new AapError('INVALID_TRANSITION', 'run ended: failed')

/** Agent ids this node talks to, parsed (base58 and multihash decoding is not free). */
const peerIds = new Map<string, PeerId>()
function peerOf (agentId: string): PeerId {
  let id = peerIds.get(agentId)
  if (id === undefined) {
    id = peerIdOfAgent(agentId)
    if (peerIds.size >= PEER_ID_CACHE_MAX_ENTRIES) peerIds.clear()
    peerIds.set(agentId, id)
  }
  return id
}

function newRunId (agentId: string): string {
  return `${agentId}:${randomBytes(12).toString('hex')}`
}

function nowIso (): string {
  return new Date().toISOString()
}

/** A new running run of `agentId`, before its run.started event is committed. */
function freshRun (agentId: string, origin: Pick<Run, 'correlation_id' | 'capability' | 'delegator' | 'authorized' | 'parent_run' | 'handoff_from'>): Run {
  const now = nowIso()
  return {
    run_id: newRunId(agentId),
    agent_id: agentId,
    state: 'running',
    created_at: now,
    updated_at: now,
    ...origin,
    handoff_to: null,
    checkpoint_id: null,
    block_reason: null,
    output: null,
    failure: null,
    last_seq: 0
  }
}

function assertInputSize (input: Record<string, unknown>, what: string): void {
  // JSON.stringify has the same length as the canonical form (only key order differs) and is much cheaper
  const size = Buffer.byteLength(JSON.stringify(input))
  if (size > RUN_INPUT_MAX_BYTES) throw new InvalidRequestError(`${what} is ${size} bytes, over ${RUN_INPUT_MAX_BYTES}`, { reason: 'oversized' })
}

export class Runs {
  readonly agentId: string
  readonly store: RunStore
  private readonly host: MeshHost
  private readonly signer: EventSigner
  private readonly resolveCard: RunsInit['resolveCard']
  private readonly ownCard: RunsInit['ownCard']
  private readonly handlers = new Map<string, RunHandler>()
  private readonly active = new Map<string, Active>()
  private readonly locks = new Map<string, Promise<unknown>>()
  private readonly listeners = new Set<RunEventListener>()
  private readonly delegateClient: RpcClient
  private readonly controlClient: RpcClient
  private readonly handoffClient: RpcClient
  private readonly unserve: Array<() => Promise<void>> = []
  private readonly pendingStart = new Map<string, PendingStart>()
  private readonly maxInbound: number
  private policy?: DelegationPolicy
  private inboundActive = 0

  constructor (init: RunsInit) {
    this.host = init.host
    this.signer = new EventSigner(init.privateKey)
    this.agentId = agentIdOf(init.privateKey)
    this.store = new RunStore(init.datastore)
    this.resolveCard = init.resolveCard
    this.ownCard = init.ownCard
    this.maxInbound = init.maxConcurrentInboundRuns ?? MAX_CONCURRENT_INBOUND_RUNS
    this.delegateClient = new RpcClient(init.host, { protocol: DELEGATE_PROTOCOL, maxFrameBytes: DELEGATE_MAX_FRAME_BYTES })
    this.controlClient = new RpcClient(init.host, { protocol: CONTROL_PROTOCOL, maxFrameBytes: CONTROL_MAX_FRAME_BYTES })
    this.handoffClient = new RpcClient(init.host, { protocol: HANDOFF_PROTOCOL, maxFrameBytes: HANDOFF_MAX_FRAME_BYTES })
  }

  // ---- lifecycle ------------------------------------------------------------------

  async start (): Promise<void> {
    await this.recover()
    this.unserve.push(await serve(this.host, {
      protocol: DELEGATE_PROTOCOL,
      maxFrameBytes: DELEGATE_MAX_FRAME_BYTES,
      methods: {
        delegate: method(isWireDelegate, async (req, ctx) => ({ run: await this.acceptDelegation(req, ctx) }),
          (res, delivered) => { this.answered(res.run.run_id, delivered) })
      }
    }))
    this.unserve.push(await serve(this.host, {
      protocol: CONTROL_PROTOCOL,
      maxFrameBytes: CONTROL_MAX_FRAME_BYTES,
      methods: {
        block: method(isBlock, async (req, ctx) => ({ run: await this.applyRemote(req.run_id, ctx, { type: 'block', reason: req.reason, checkpoint_id: req.checkpoint_id }) })),
        resume: method(isResume, async (req, ctx) => ({ run: await this.applyRemote(req.run_id, ctx, { type: 'resume', resolution: req.resolution }) })),
        cancel: method(isCancel, async (req, ctx) => ({ run: await this.applyRemote(req.run_id, ctx, { type: 'cancel', reason: req.reason ?? 'canceled by delegator' }) })),
        get_run: method(isGetRun, async (req) => ({ run: await this.localRun(req.run_id) })),
        handoff: method(isControlHandoff, async (req, ctx) => {
          const run = await this.localRun(req.run_id)
          const actor = this.actorOf(run, ctx.peer.toString())
          return { run: await this.handoffLocal(run.run_id, req.to_agent, req.context, actor) }
        })
      }
    }))
    this.unserve.push(await serve(this.host, {
      protocol: HANDOFF_PROTOCOL,
      maxFrameBytes: HANDOFF_MAX_FRAME_BYTES,
      methods: {
        handoff: method(isWireHandoff, async (req, ctx) => ({ run: await this.acceptHandoff(req, ctx) }),
          (res, delivered) => { this.answered(res.run.run_id, delivered) })
      }
    }))
  }

  async stop (): Promise<void> {
    for (const u of this.unserve.splice(0)) await u()
    for (const a of this.active.values()) a.abort.abort(new Error('node stopping'))
    // outgoing calls end now (a handoff in progress holds its run's lock while it waits on the receiver)
    this.delegateClient.close()
    this.controlClient.close()
    this.handoffClient.close()
    // let in-flight commits finish so nothing acknowledged is half-written
    await Promise.allSettled([...this.locks.values()])
    await this.store.flushOutgoing()
  }

  /**
   * After a restart: runs that were executing cannot continue (their handler's
   * memory is gone), so they fail with EXECUTOR_RESTARTED; blocked runs stay
   * blocked and are handed to their capability's handler when resumed.
   */
  private async recover (): Promise<void> {
    const interrupted: Run[] = []
    for await (const run of this.store.all()) {
      if (isTerminal(run.state)) continue
      this.inboundActive++
      this.active.set(run.run_id, { run, abort: new AbortController(), handlerRunning: false })
      if (run.state === 'running') interrupted.push(run)
    }
    for (const run of interrupted) {
      await this.apply(run.run_id, { type: 'fail', code: 'EXECUTOR_RESTARTED', message: 'the executing node restarted while the run was executing' }, { role: 'executor' })
        .catch(() => {})
    }
  }

  // ---- agent side: handlers, policy, events ------------------------------------------

  /** Serve a capability with an in-process handler. The card must declare it to receive work. */
  handle (capability: CapabilityRef, handler: RunHandler): void {
    this.handlers.set(capabilityString(capability), handler)
  }

  unhandle (capability: CapabilityRef): void {
    this.handlers.delete(capabilityString(capability))
  }

  setPolicy (policy: DelegationPolicy | undefined): void {
    this.policy = policy
  }

  /** Every event this node commits for runs it executes, after it is durable. */
  onEvent (listener: RunEventListener): () => void {
    this.listeners.add(listener)
    return () => { this.listeners.delete(listener) }
  }

  // ---- caller side ------------------------------------------------------------------

  /** `agent.delegate`: returns the Run handle once the executor has stored it; never waits for the work. */
  async delegate (req: DelegateRequest, opts: CallOptions = {}): Promise<Run> {
    const body: WireDelegate = {
      to_agent: req.to_agent,
      task_id: req.task_id,
      capability: req.capability,
      input: req.input,
      parent_run: req.parent_run ?? null,
      ...(req.idempotency_key === undefined ? {} : { idempotency_key: req.idempotency_key }),
      ...(req.authorized === undefined ? {} : { authorized: req.authorized })
    }
    isWireDelegate.assert(body, 'delegate request')
    assertInputSize(body.input, 'input')
    if (req.to_agent === this.agentId) throw new DelegationRefusedError('an agent does not delegate to itself; a blocked run must be resumed by another agent')
    const peer = peerOf(req.to_agent)
    const card = await this.resolveCard(req.to_agent, opts.signal === undefined ? {} : { signal: opts.signal })
    if (!supports(card, req.capability)) {
      throw new CapabilityNotSupportedError(`agent ${req.to_agent} does not declare ${capabilityString(req.capability)}`, { capability: req.capability })
    }
    const res = await this.delegateClient.call(peer, 'delegate', body, {
      ...opts,
      onLateAnswer: (late) => { void this.lateDelegation(late, body).catch(() => {}) }
    })
    const run = this.checkRunResponse(res, req.to_agent)
    // the handle is durable where it counts (the executor committed the run before answering);
    // the delegator's own record is readable at once and written behind (see RunStore.putOutgoing)
    this.store.putOutgoing(run).catch(() => {})
    return run
  }

  /**
   * The executor created a run, but its handle came after this delegate gave
   * up. Without an idempotency key the caller cannot learn about it again, so
   * the run is canceled (the executor emits run.failed); with one, a retry
   * returns it, so it is only recorded.
   */
  private async lateDelegation (late: Record<string, unknown>, body: WireDelegate): Promise<void> {
    const run = this.checkRunResponse(late, body.to_agent)
    if (run.delegator !== this.agentId || run.correlation_id !== body.task_id) return
    if (body.idempotency_key !== undefined) {
      await this.noteOutgoing(run)
      return
    }
    await this.cancel(run.run_id, 'the delegator stopped waiting for the run handle before it arrived')
  }

  /** `agent.block`: the executor blocks its own run; the delegator blocks a run it delegated. */
  async block (runId: string, reason: string, checkpointId: string, opts: CallOptions = {}): Promise<Run> {
    const body = { run_id: runId, reason, checkpoint_id: checkpointId }
    isBlock.assert(body, 'block request')
    if (this.isLocal(runId)) return this.apply(runId, { type: 'block', reason, checkpoint_id: checkpointId }, { role: 'executor' })
    return this.remoteControl(runId, 'block', body, opts)
  }

  /** `agent.resume`: only the delegator or an agent it authorized; a run never resumes itself. */
  async resume (runId: string, resolution: Record<string, unknown>, opts: CallOptions = {}): Promise<Run> {
    const body = { run_id: runId, resolution }
    isResume.assert(body, 'resume request')
    if (this.isLocal(runId)) return this.apply(runId, { type: 'resume', resolution }, { role: 'executor' })
    return this.remoteControl(runId, 'resume', body, opts)
  }

  /** Extension: end a run in `failed` with reason `canceled` (delegator or authorized only). */
  async cancel (runId: string, reason = 'canceled by delegator', opts: CallOptions = {}): Promise<Run> {
    const body = { run_id: runId, reason }
    isCancel.assert(body, 'cancel request')
    if (this.isLocal(runId)) return this.apply(runId, { type: 'cancel', reason }, { role: 'executor' })
    return this.remoteControl(runId, 'cancel', body, opts)
  }

  /** `agent.handoff`: a new run on `toAgent` with the same correlation_id; the old run becomes read-only. */
  async handoff (runId: string, toAgent: string, context: Record<string, unknown>, opts: CallOptions = {}): Promise<Run> {
    const body = { run_id: runId, to_agent: toAgent, context }
    isControlHandoff.assert(body, 'handoff request')
    if (this.isLocal(runId)) return this.handoffLocal(runId, toAgent, context, { role: 'executor' }, opts)
    return this.remoteControl(runId, 'handoff', body, opts)
  }

  /** The run as its executor knows it (RUN_NOT_FOUND if it does not exist). */
  async getRun (runId: string, opts: CallOptions = {}): Promise<Run> {
    isGetRun.assert({ run_id: runId }, 'run id')
    if (this.isLocal(runId)) return this.localRun(runId)
    return this.remoteControl(runId, 'get_run', { run_id: runId }, opts)
  }

  /** Runs this node executes and runs it delegated (its last known view of them). */
  async list (filter: { state?: string, correlation_id?: string } = {}): Promise<{ executing: Run[], delegated: Run[] }> {
    const match = (r: Run): boolean => (filter.state === undefined || r.state === filter.state) &&
      (filter.correlation_id === undefined || r.correlation_id === filter.correlation_id)
    const executing: Run[] = []
    for await (const r of this.store.all()) if (match(r)) executing.push(this.active.get(r.run_id)?.run ?? r)
    const delegated: Run[] = []
    for await (const r of this.store.allOutgoing()) if (match(r)) delegated.push(r)
    return { executing, delegated }
  }

  /** Record the delegator's latest view of a run it started (from events or get_run). */
  async noteOutgoing (run: Run): Promise<void> {
    const prev = await this.store.getOutgoing(run.run_id)
    if (prev === undefined || prev.last_seq <= run.last_seq) await this.store.putOutgoing(run)
  }

  isLocal (runId: string): boolean {
    return executorOfRun(runId) === this.agentId
  }

  private async remoteControl (runId: string, type: string, body: object, opts: CallOptions): Promise<Run> {
    const executor = executorOfRun(runId)
    if (executor === '') throw new RunNotFoundError(`"${runId.slice(0, 80)}" is not a run id`)
    let peer
    try {
      peer = peerOf(executor)
    } catch {
      throw new RunNotFoundError(`"${runId.slice(0, 80)}" is not a run id`)
    }
    const res = await this.controlClient.call(peer, type, body, opts)
    const run = this.checkRunResponse(res, undefined)
    if (type !== 'handoff') await this.noteOutgoingIfMine(run)
    return run
  }

  private async noteOutgoingIfMine (run: Run): Promise<void> {
    if (run.delegator === this.agentId) await this.noteOutgoing(run)
  }

  private checkRunResponse (res: Record<string, unknown>, expectAgent: string | undefined): Run {
    const run = isRun.assert(res.run, 'run from peer')
    if (expectAgent !== undefined && (run.agent_id !== expectAgent || executorOfRun(run.run_id) !== expectAgent)) {
      throw new InvalidRequestError('peer answered with a run of another agent')
    }
    return run
  }

  // ---- executor side --------------------------------------------------------------------

  private actorOf (run: Run, peer: string): Actor {
    if (peer === run.agent_id) return { role: 'executor' }
    if (peer === run.delegator) return { role: 'delegator', agent_id: peer }
    if (run.authorized.includes(peer)) return { role: 'authorized', agent_id: peer }
    return { role: 'other', agent_id: peer }
  }

  private async localRun (runId: string): Promise<Run> {
    const a = this.active.get(runId)
    if (a !== undefined) return a.run
    const run = this.isLocal(runId) ? await this.store.get(runId) : undefined
    if (run === undefined) throw new RunNotFoundError(`no run ${runId.slice(0, 160)} on agent ${this.agentId}`, { run_id: runId.slice(0, 128) })
    return run
  }

  private async applyRemote (runId: string, ctx: CallContext, command: RunCommand): Promise<Run> {
    const run = await this.localRun(runId)
    return this.apply(runId, command, this.actorOf(run, ctx.peer.toString()))
  }

  private async acceptDelegation (req: WireDelegate, ctx: CallContext): Promise<Run> {
    const from = ctx.peer.toString()
    if (req.to_agent !== this.agentId) throw new AgentNotFoundError(`this node is agent ${this.agentId}, not ${req.to_agent}`)
    assertInputSize(req.input, 'input')
    this.checkCapability(req.capability)
    const key = req.idempotency_key
    if (key === undefined) return this.acceptNew(req, from, ctx.signal)
    // retries of one key are serialised, so two of them never create two runs
    return this.withLock(`idem:${from}:${key}`, async () => {
      const existing = await this.store.idempotent(from, key)
      const run = existing === undefined ? undefined : this.active.get(existing)?.run ?? await this.store.get(existing)
      if (run === undefined) return this.acceptNew(req, from, ctx.signal)
      if (run.correlation_id !== req.task_id || capabilityString(run.capability) !== capabilityString(req.capability) || run.parent_run !== req.parent_run) {
        throw new InvalidRequestError('this idempotency_key was used for a different delegation', { reason: 'idempotency_conflict', run_id: run.run_id })
      }
      return run
    })
  }

  private async acceptNew (req: WireDelegate, from: string, signal: AbortSignal): Promise<Run> {
    this.reserveSlot()
    let created: Run
    try {
      await this.askPolicy(from, req.task_id, req.capability, req.input, signal)
      const run = freshRun(this.agentId, {
        correlation_id: req.task_id,
        capability: req.capability,
        delegator: from,
        authorized: req.authorized ?? [],
        parent_run: req.parent_run,
        handoff_from: null
      })
      created = await this.create(run, {
        delegator: from, capability: req.capability, parent_run: req.parent_run, input: req.input
      }, req.idempotency_key === undefined ? undefined : { delegator: from, key: req.idempotency_key })
    } catch (err) {
      this.inboundActive--
      throw err
    }
    this.pendingStart.set(created.run_id, { input: req.input, handoff: null, recoverable: req.idempotency_key !== undefined })
    return created
  }

  /**
   * The answer that carries a new run's handle was handed to the stream, or
   * could not be. The handler starts only once the delegator has the handle;
   * a handle that never reached anyone fails the run (run.failed), since no
   * one could ever resume, cancel or even find it.
   */
  private answered (runId: string, delivered: boolean): void {
    this.announceStart(runId)
    const p = this.pendingStart.get(runId)
    if (p === undefined) return // an idempotent retry: the run was started by the first request
    this.pendingStart.delete(runId)
    if (delivered || p.recoverable) {
      this.dispatch(runId, p.input, p.handoff, null)
      return
    }
    void this.apply(runId, { type: 'fail', code: 'HANDLE_UNDELIVERED', message: 'the run was created but its handle could not be delivered to the caller' }, { role: 'executor' })
      .catch(() => {})
  }

  private async acceptHandoff (req: WireHandoff, ctx: CallContext): Promise<Run> {
    const from = ctx.peer.toString()
    if (req.to_agent !== this.agentId) throw new AgentNotFoundError(`this node is agent ${this.agentId}, not ${req.to_agent}`)
    // the executor of the old run sends the handoff (also when its delegator asked for it), and the
    // run id names that executor: so the lineage a new run records is never a third party's claim
    if (from !== executorOfRun(req.from_run.run_id) || req.from_run.agent_id !== from) {
      throw new UnauthorizedError('a handoff must come from the executor of the run it transfers', { reason: 'not_executor' })
    }
    assertInputSize(req.input, 'input')
    assertInputSize(req.context, 'context')
    this.checkCapability(req.capability)
    this.reserveSlot()
    try {
      await this.askPolicy(from, req.task_id, req.capability, req.input, ctx.signal)
      return await this.createHandoff(req, from)
    } catch (err) {
      this.inboundActive--
      throw err
    }
  }

  private async createHandoff (req: WireHandoff, from: string): Promise<Run> {
    const run = freshRun(this.agentId, {
      correlation_id: req.task_id,
      capability: req.capability,
      delegator: req.delegator,
      authorized: req.authorized,
      parent_run: req.parent_run,
      handoff_from: req.from_run
    })
    const created = await this.create(run, {
      delegator: req.delegator, capability: req.capability, parent_run: req.parent_run, handoff_from: req.from_run, handoff_by: from, context: req.context
    }, undefined)
    this.pendingStart.set(created.run_id, { input: req.input, handoff: { from: req.from_run, context: req.context }, recoverable: false })
    return created
  }

  private checkCapability (capability: CapabilityRef): void {
    const card = this.ownCard()
    if (card === undefined || !supports(card, capability) || !this.handlers.has(capabilityString(capability))) {
      throw new CapabilityNotSupportedError(`agent ${this.agentId} does not serve ${capabilityString(capability)}`, { capability })
    }
  }

  /** Take one of the node's run slots now (released when the run ends or is never created). */
  private reserveSlot (): void {
    if (this.inboundActive >= this.maxInbound) {
      throw new DelegationRefusedError(`agent is at its limit of ${this.maxInbound} concurrent runs`, { reason: 'capacity', limit: this.maxInbound })
    }
    this.inboundActive++
  }

  private async askPolicy (from: string, taskId: string, capability: CapabilityRef, input: Record<string, unknown>, signal: AbortSignal): Promise<void> {
    if (this.policy === undefined) return
    const refusal = await this.policy({ from, task_id: taskId, capability, input, signal })
    if (refusal !== undefined) throw new DelegationRefusedError(refusal.slice(0, REASON_MAX_CHARS), { reason: 'policy' })
  }

  /**
   * Tell the listeners (the events service publishes on gossip) about a new
   * run's run.started, once. Held back from `create` until the answer with
   * the handle is handed to the stream: the answer leaves first, ahead of the
   * publish, and the delegator reads its handle before it spends time
   * verifying the gossip copy. Announced, at the latest, before the run's
   * next event.
   */
  private announceStart (runId: string): void {
    const a = this.active.get(runId)
    const u = a?.unannounced
    if (a === undefined || u === undefined) return
    a.unannounced = undefined
    this.emit(u.event, u.run)
  }

  /** Store a new run with its run.started event, durable before it is returned. */
  private async create (run: Run, startedPayload: Record<string, unknown>, idem: { delegator: string, key: string } | undefined): Promise<Run> {
    const event = await this.signer.sign({
      run_id: run.run_id,
      correlation_id: run.correlation_id,
      type: 'run.started',
      payload: startedPayload,
      at: run.created_at,
      seq: 1,
      prev: null,
      executor: this.agentId
    })
    const stored: Run = { ...run, last_seq: 1 }
    await this.store.commit(stored, event, idem)
    this.active.set(stored.run_id, { run: stored, last: event, abort: new AbortController(), handlerRunning: false, unannounced: { event, run: stored } })
    return stored
  }

  /**
   * The one way a run changes: under the run's lock, the pure state machine
   * decides, the event is signed and committed with the new state, then the
   * change is announced.
   */
  private async apply (runId: string, command: RunCommand, actor: Actor): Promise<Run> {
    return this.withLock(runId, async () => this.applyLocked(runId, command, actor))
  }

  /** `apply` for a caller that already holds the run's lock. */
  private async applyLocked (runId: string, command: RunCommand, actor: Actor): Promise<Run> {
    {
      const a = this.active.get(runId)
      const run = a?.run ?? await this.localRun(runId)
      const now = nowIso()
      const outcome = transition(run, command, actor, now)
      if (!outcome.ok) throw outcome.error
      const last = a?.last ?? await this.store.log.head(runId)
      const seq = (last?.seq ?? 0) + 1
      const event = await this.signer.sign({
        run_id: runId,
        correlation_id: run.correlation_id,
        type: outcome.result.event.type,
        payload: outcome.result.event.payload,
        at: now,
        seq,
        prev: last === undefined ? null : eventHash(last),
        executor: this.agentId
      })
      const next: Run = { ...outcome.result.run, last_seq: seq }
      await this.store.commit(next, event)
      this.announceStart(runId)
      this.settle(runId, a, next, event, command)
      this.emit(event, next)
      return next
    }
  }

  private settle (runId: string, a: Active | undefined, next: Run, event: AgentEvent, command: RunCommand): void {
    if (a === undefined) return
    a.run = next
    a.last = event
    if (next.state === 'blocked' && a.resumed === undefined) {
      a.resumed = Promise.withResolvers()
      // only a handler call made while blocked awaits it; an unawaited rejection is not an error
      a.resumed.promise.catch(() => {})
    }
    if (command.type === 'resume') {
      const resolution = command.resolution
      const resumed = a.resumed
      a.resumed = undefined
      if (a.waiter !== undefined) {
        const w = a.waiter
        a.waiter = undefined
        w(resolution)
      } else if (!a.handlerRunning) {
        // blocked across a restart: the handler starts again with the resolution
        void this.dispatchRestored(runId, next, resolution).catch(() => {})
      }
      resumed?.resolve(resolution)
    }
    if (isTerminal(next.state)) {
      this.active.delete(runId)
      this.inboundActive--
      const ended = next.state === 'completed' ? RUN_COMPLETED : RUN_FAILED
      a.abort.abort(ended)
      a.resumed?.reject(ended)
    }
  }

  private async withLock<T> (runId: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.locks.get(runId) ?? Promise.resolve()
    const run = prev.then(fn, fn)
    const tail = run.catch(() => {})
    this.locks.set(runId, tail)
    try {
      return await run
    } finally {
      if (this.locks.get(runId) === tail) this.locks.delete(runId)
    }
  }

  private emit (event: AgentEvent, run: Run): void {
    for (const l of this.listeners) {
      try { l(event, run) } catch { /* a listener never breaks a run */ }
    }
  }

  /**
   * Hand a run this node executes to another agent. The run's lock is held
   * from the check to the transition, so two handoffs of one run never both
   * reach a receiver.
   */
  private async handoffLocal (runId: string, toAgent: string, context: Record<string, unknown>, actor: Actor, opts: CallOptions = {}): Promise<Run> {
    return this.withLock(runId, async () => {
      const old = await this.localRun(runId)
      // check first, so a terminal run or a stranger's request never reaches the receiver
      const dry = transition(old, { type: 'handoff', to: { run_id: `${toAgent}:pending`, agent_id: toAgent } }, actor, nowIso())
      if (!dry.ok) throw dry.error
      if (toAgent === this.agentId) throw new DelegationRefusedError('a run is not handed off to its own executor')
      const card = await this.resolveCard(toAgent, opts.signal === undefined ? {} : { signal: opts.signal })
      if (!supports(card, old.capability)) {
        throw new CapabilityNotSupportedError(`agent ${toAgent} does not declare ${capabilityString(old.capability)}`, { capability: old.capability })
      }
      const started = await this.store.log.get(runId, 1)
      const input = (started?.payload.input ?? {}) as Record<string, unknown>
      const body: WireHandoff = {
        to_agent: toAgent,
        from_run: { run_id: old.run_id, agent_id: old.agent_id },
        task_id: old.correlation_id,
        capability: old.capability,
        input,
        context,
        delegator: old.delegator,
        authorized: old.authorized,
        parent_run: old.parent_run
      }
      const res = await this.handoffClient.call(peerOf(toAgent), 'handoff', body, opts)
      const created = this.checkRunResponse(res, toAgent)
      if (created.correlation_id !== old.correlation_id) throw new InvalidRequestError('receiver changed the correlation_id')
      await this.applyLocked(runId, { type: 'handoff', to: { run_id: created.run_id, agent_id: toAgent } }, actor)
      return created
    })
  }

  /** A run that was blocked when the node restarted is resumed: its handler starts again, from its stored input. */
  private async dispatchRestored (runId: string, run: Run, resolution: Record<string, unknown>): Promise<void> {
    const started = await this.store.log.get(runId, 1)
    const payload = started?.payload ?? {}
    const input = (payload.input ?? {}) as Record<string, unknown>
    const handoff = run.handoff_from === null ? null : { from: run.handoff_from, context: (payload.context ?? {}) as Record<string, unknown> }
    this.dispatch(runId, input, handoff, { checkpoint_id: run.checkpoint_id, resolution })
  }

  /** Run the capability's handler for a run, outside the caller's request. */
  private dispatch (runId: string, input: Record<string, unknown>, handoff: RunContext['handedOff'], restored: RunContext['restored']): void {
    const a = this.active.get(runId)
    if (a === undefined) return
    const handler = this.handlers.get(capabilityString(a.run.capability))
    setImmediate(() => { void this.runHandler(runId, a, handler, input, handoff, restored) })
  }

  private async runHandler (runId: string, a: Active, handler: RunHandler | undefined, input: Record<string, unknown>, handoff: RunContext['handedOff'], restored: RunContext['restored']): Promise<void> {
    const exec: Actor = { role: 'executor' }
    if (handler === undefined) {
      await this.apply(runId, { type: 'fail', code: 'HANDLER_FAILED', message: 'no handler is registered for this capability' }, exec).catch(() => {})
      return
    }
    const untilRunning = async (): Promise<void> => {
      while (a.run.state === 'blocked' && a.resumed !== undefined) await a.resumed.promise
    }
    const ctx: RunContext = {
      run: a.run,
      input,
      signal: a.abort.signal,
      handedOff: handoff,
      restored,
      progress: async (payload) => {
        await untilRunning()
        await this.apply(runId, { type: 'progress', payload }, exec)
      },
      block: async (reason, checkpointId) => {
        const { promise, resolve } = Promise.withResolvers<Record<string, unknown>>()
        a.waiter = resolve
        try {
          await this.apply(runId, { type: 'block', reason, checkpoint_id: checkpointId }, exec)
        } catch (err) {
          a.waiter = undefined
          throw err
        }
        const aborted = new Promise<never>((_resolve, reject) => {
          if (a.abort.signal.aborted) reject(a.abort.signal.reason)
          a.abort.signal.addEventListener('abort', () => { reject(a.abort.signal.reason) }, { once: true })
        })
        return Promise.race([promise, aborted])
      },
      complete: async (output) => {
        await untilRunning()
        await this.apply(runId, { type: 'complete', output }, exec)
      },
      fail: async (message) => {
        await this.apply(runId, { type: 'fail', code: 'HANDLER_FAILED', message }, exec)
      },
      handoff: async (toAgent, context) => this.handoffLocal(runId, toAgent, context, exec)
    }
    a.handlerRunning = true
    try {
      const output = await handler(ctx)
      if (this.active.has(runId) && a.run.state === 'running') {
        await this.apply(runId, { type: 'complete', output: output ?? {} }, exec)
      }
    } catch (err) {
      if (this.active.has(runId) && !isTerminal(a.run.state) && !a.abort.signal.aborted) {
        const message = toAapError(err).message.slice(0, 1000)
        await this.apply(runId, { type: 'fail', code: 'HANDLER_FAILED', message }, exec).catch(() => {})
      }
    } finally {
      a.handlerRunning = false
    }
  }
}
