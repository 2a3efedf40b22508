/**
 * The executing side of the run protocols: serves /aap/delegate,
 * /aap/control and /aap/handoff, creates runs, and moves them through the
 * pure state machine. Every transition is committed with its signed event
 * before anything is acknowledged, under the run's lock.
 *
 * Authority comes from the Noise-authenticated remote PeerId of each request:
 * the delegator (or an agent it authorized) resumes and cancels; the executor
 * raises blocks and completes; nobody else changes a run.
 */
import type { PrivateKey } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'
import type { Logger } from '../logger.ts'
import { capabilityString, type AgentCard, type CapabilityRef } from '../card/card.ts'
import { HANDOFF_MAX_FRAME_BYTES, HANDOFF_PROTOCOL } from '../constants.ts'
import { AapError, AgentNotFoundError, InvalidRequestError, RunNotFoundError, toAapError } from '../errors.ts'
import { eventHash, executorOfRun, type SignatureCache } from '../runlog/event.ts'
import { rememberTicket, type RunTicket } from '../runlog/ticket.ts'
import { EventSigner } from '../runlog/signer.ts'
import { isTerminal, type AgentEvent, type Run } from '../runlog/types.ts'
import { KeyedMutex } from '../util/concurrency.ts'
import type { MeshHost } from '../wire/host.ts'
import { RpcClient, type CallContext } from '../wire/rpc.ts'
import type { ArtifactWriter } from '../artifacts/types.ts'
import { noteBlocked, noteResumed, startHandler, type Active, type HandlerHost, type PendingStart } from './handlers.ts'
import { askPolicy, assertServes, checkDelegation, checkHandoff, runOfTicket, signatureVerdict } from './admission.ts'
import { sendHandoff, type HandoffOptions, type HandoffSide } from './handoff.ts'
import { HandoffConfirmations } from './confirmations.ts'
import { Contexts, contextEntry } from './contexts.ts'
import { adoptVerdict, assertResumable, restartResumed, settleInterrupted, verdictOn, type DelegatorVerdict, type RecoverySide } from './recovery.ts'
import { assertContextSize, assertInputSize, type WireDelegate, type WireHandoff, type WireHandoffConfirm } from './messages.ts'
import { serveRunProtocols } from './protocols.ts'
import { writeEnding } from './end-retry.ts'
import { RunSlots } from './slots.ts'
import { transition } from './state-machine.ts'
import { actorOf, EXECUTOR } from './actors.ts'
import type { RunStore } from './store.ts'
import type { Actor, Conversation, DelegationPolicy, RunCommand, RunContext, RunEventListener, RunHandler } from './types.ts'

export interface RunExecutorInit {
  host: MeshHost
  privateKey: PrivateKey
  agentId: string
  store: RunStore
  resolveCard: (agentId: string, opts?: { signal?: AbortSignal, offered?: unknown, wants?: (card: AgentCard) => boolean }) => Promise<AgentCard>
  ownCard: () => AgentCard | undefined
  maxConcurrentInboundRuns: number
  /** One delegator's share of them (default: a quarter of the limit, at most MAX_INBOUND_RUNS_PER_DELEGATOR; slots.ts). */
  maxInboundRunsPerDelegator?: number
  log: Logger
  /** A run as its (remote) executor knows it: how a handoff receiver asks after an unconfirmed handoff. */
  getRemoteRun: (runId: string) => Promise<Run>
  handoffConfirmTimeoutMs?: number
  /** Each request's budget on the run protocols (default HANDLER_TIMEOUT_MS). */
  handlerTimeoutMs?: number
  /** A run's delegator's liveness verdict, if it signed one (recovery.ts). */
  verdictFrom: RecoverySide['verdictFrom']
  /** Where conversations are kept (contexts.ts). */
  contextData: Datastore
  /** Where a handler's `ctx.artifact` stores its bytes. */
  artifacts?: ArtifactWriter
  /** The node's verified-signature cache (src/runlog/event.ts), shared with no other node. */
  signatures: SignatureCache
}

/** Why a handler's signal aborts when its run ends; built once (an Error captures a stack trace, costly per run). */
const RUN_COMPLETED = new AapError('INVALID_TRANSITION', 'run ended: completed')
const RUN_FAILED = new AapError('INVALID_TRANSITION', 'run ended: failed')
const nowIso = (): string => new Date().toISOString()

export class RunExecutor implements HandlerHost {
  readonly log: Logger
  readonly artifacts: ArtifactWriter | undefined
  private readonly host: MeshHost
  private readonly agentId: string
  private readonly store: RunStore
  private readonly signer: EventSigner
  private readonly resolveCard: RunExecutorInit['resolveCard']
  private readonly ownCard: RunExecutorInit['ownCard']
  /** Running or blocked runs held, for the node and per delegator (slots.ts). */
  readonly slots: RunSlots
  private readonly handlers = new Map<string, RunHandler>()
  private readonly active = new Map<string, Active>()
  private readonly locks = new KeyedMutex()
  private readonly listeners = new Set<RunEventListener>()
  private readonly pendingStart = new Map<string, PendingStart>()
  private readonly handoffClient: RpcClient
  private readonly key: PrivateKey
  readonly confirmations: HandoffConfirmations
  private readonly unserve: Array<() => Promise<void>> = []
  private readonly verdictFrom: RecoverySide['verdictFrom']
  private readonly signatures: SignatureCache
  private readonly contexts: Contexts
  private readonly stopping = new AbortController()
  private readonly handlerTimeoutMs: number | undefined
  /** Runs that were executing when the node stopped, and recovery settling them (recovery.ts). */
  private interrupted: Run[] = []
  private settling?: Promise<void>
  private policy?: DelegationPolicy

  constructor (init: RunExecutorInit) {
    this.host = init.host
    this.agentId = init.agentId
    this.store = init.store
    this.key = init.privateKey
    this.signer = new EventSigner(init.privateKey)
    this.signatures = init.signatures
    this.confirmations = new HandoffConfirmations({
      log: init.log,
      signatures: init.signatures,
      getRemoteRun: init.getRemoteRun,
      ...(init.handoffConfirmTimeoutMs === undefined ? {} : { timeoutMs: init.handoffConfirmTimeoutMs }),
      // a successor canceled while it waited has ended already: nothing to fail
      // written again while the disk refuses it: else the successor would stay running with no handler, its slot held
      fail: async (runId, message) => { if (this.active.has(runId)) await writeEnding(async () => this.apply(runId, { type: 'fail', code: 'HANDOFF_UNCONFIRMED', message }, EXECUTOR), { runId, active: () => this.active.get(runId)?.run.state === 'running', signal: this.stopping.signal, log: this.log }) }
    })
    this.resolveCard = init.resolveCard
    this.ownCard = init.ownCard
    this.slots = new RunSlots(init.maxConcurrentInboundRuns, init.maxInboundRunsPerDelegator)
    this.log = init.log
    this.artifacts = init.artifacts
    this.handlerTimeoutMs = init.handlerTimeoutMs
    this.handoffClient = new RpcClient(init.host, { protocol: HANDOFF_PROTOCOL, maxFrameBytes: HANDOFF_MAX_FRAME_BYTES, log: init.log })
    this.verdictFrom = init.verdictFrom
    this.contexts = new Contexts(init.contextData, init.store, init.agentId)
  }

  // ---- lifecycle ------------------------------------------------------------------

  async start (): Promise<void> {
    await this.recover()
    this.unserve.push(...await serveRunProtocols(this.host, this, this.log, this.handlerTimeoutMs))
    // the interrupted runs' delegators are asked over the network: in the background
    this.settling = settleInterrupted(this.side, this.interrupted.splice(0))
  }

  /** Resolves once the runs interrupted by the last stop are settled (recovery.ts). */
  async recovered (): Promise<void> { await this.settling }

  async stop (): Promise<void> {
    this.stopping.abort(new Error('node stopping'))
    await this.settling
    for (const u of this.unserve.splice(0)) await u()
    this.confirmations.stop()
    for (const a of this.active.values()) a.abort.abort(new Error('node stopping'))
    // a handoff in progress holds its run's lock while it waits on the receiver: end it now
    this.handoffClient.close()
    // let in-flight commits finish so nothing acknowledged is half-written
    await this.store.idempotencyIdle()
    await this.locks.idle()
  }

  /**
   * After a restart: runs that were executing cannot continue (their handler's
   * memory is gone): recovery.ts ends them, with their delegator's verdict if
   * it declared this node lost, else with EXECUTOR_RESTARTED. Blocked runs stay
   * blocked and are handed to their capability's handler when resumed.
   */
  private async recover (): Promise<void> {
    for await (const run of this.store.live('executing')) {
      if (isTerminal(run.state)) continue
      this.slots.restore(run.handoff_from?.agent_id ?? run.delegator, run.run_id)
      this.active.set(run.run_id, { run, abort: new AbortController(), handlerRunning: false, ...(run.state === 'blocked' ? { blockedAcrossRestart: true as const } : {}) })
      this.interrupted.push(run)
    }
  }

  /** A delegator's liveness verdict on a run this node executes (recovery.ts). */
  async adoptVerdict (runId: string, verdict: AgentEvent, peer: string): Promise<Run> { return adoptVerdict(this.side, runId, verdict, peer) }
  /** The verdict this node signed, as a delegator, on a run it delegated (null: none). */
  async verdictOn (runId: string): Promise<DelegatorVerdict> { return verdictOn(this.store, this.agentId, runId) }

  // ---- the agent's side: handlers, policy, events -----------------------------------

  handle (capability: CapabilityRef, handler: RunHandler): void { this.handlers.set(capabilityString(capability), handler) }
  unhandle (capability: CapabilityRef): void { this.handlers.delete(capabilityString(capability)) }
  handles (capability: CapabilityRef): boolean { return this.handlers.has(capabilityString(capability)) }
  setPolicy (policy: DelegationPolicy | undefined): void { this.policy = policy }

  onEvent (listener: RunEventListener): () => void {
    this.listeners.add(listener)
    return () => { this.listeners.delete(listener) }
  }

  async conversation (run: Run, fresh = false): Promise<Conversation> { return this.contexts.conversation(run, fresh) }
  async saveContext (run: Run, context: Record<string, unknown>): Promise<void> { await this.locks.run(run.run_id, async () => { await this.contexts.save(this.active.get(run.run_id)?.run ?? await this.store.get(run.run_id) ?? run, context) }) }
  isActive (runId: string): boolean { return this.active.has(runId) }

  /** The run as this node holds it now (live state for active runs). */
  current (run: Run): Run { return this.active.get(run.run_id)?.run ?? run }

  // ---- inbound requests -------------------------------------------------------------

  actorOf (run: Run, peer: string): Actor { return actorOf(run, peer) }

  /** A run this node executes (RUN_NOT_FOUND otherwise). */
  async localRun (runId: string): Promise<Run> {
    const a = this.active.get(runId)
    if (a !== undefined) return a.run
    const run = executorOfRun(runId) === this.agentId ? await this.store.get(runId) : undefined
    if (run === undefined) throw new RunNotFoundError(`no run ${runId.slice(0, 160)} on agent ${this.agentId}`, { run_id: runId.slice(0, 128) })
    return run
  }

  async applyRemote (runId: string, ctx: CallContext, command: RunCommand): Promise<Run> {
    const run = await this.localRun(runId)
    return this.apply(runId, command, this.actorOf(run, ctx.peer.toString()))
  }

  async acceptDelegation (req: WireDelegate, ctx: CallContext): Promise<Run> {
    const from = ctx.peer.toString()
    if (req.to_agent !== this.agentId) throw new AgentNotFoundError(`this node is agent ${this.agentId}, not ${req.to_agent}`)
    assertInputSize(req.input, 'input')
    assertServes(this.ownCard(), this.handlers, req.capability, this.agentId)
    // the signature is checked on the thread pool meanwhile (see signatureVerdict); a bad one is the answer
    const verdict = signatureVerdict(req, this.signatures)
    const refuse = async (err?: unknown): Promise<never> => { throw (await verdict) ?? err }
    let ticket: RunTicket
    try {
      ticket = checkDelegation(req, from, this.agentId, this.signatures, { signatureChecked: true })
    } catch (err) {
      return refuse(err)
    }
    const key = req.idempotency_key
    if (key === undefined) return this.acceptNew(req, ticket, from, ctx.signal, verdict).catch(refuse)
    if (await verdict !== undefined) return refuse()
    // retries of one key are serialised, so two of them never create two runs (and the sweep of expired records waits)
    return this.store.withIdempotencyKey(from, key, async () => {
      const existing = await this.store.idempotent(from, key)
      const run = existing === undefined ? undefined : this.active.get(existing)?.run ?? await this.store.get(existing)
      if (run === undefined) return this.acceptNew(req, ticket, from, ctx.signal, verdict)
      if (run.correlation_id !== req.task_id || capabilityString(run.capability) !== capabilityString(req.capability) || run.parent_run !== req.parent_run) {
        throw new InvalidRequestError('this idempotency_key was used for a different delegation', { reason: 'idempotency_conflict', run_id: run.run_id })
      }
      return run
    })
  }

  private async acceptNew (req: WireDelegate, ticket: RunTicket, from: string, signal: AbortSignal, verdict: Promise<unknown>): Promise<Run> {
    // checks in order (delegate.md): a ticket that does not verify (5) takes no slot (7) and never reaches the policy (8)
    if (await verdict !== undefined) throw await verdict
    this.slots.take(from, ticket.run_id)
    let created: Run
    try {
      await askPolicy(this.policy, { from, task_id: req.task_id, capability: req.capability, input: req.input, signal }, this.handlerTimeoutMs)
      // looked up while run.started is signed; its refusal (held, never unhandled) comes first: `create` writes nothing until known
      const unique = this.assertNewRunId(ticket.run_id).then(() => undefined, (err: unknown) => err)
      const idem = req.idempotency_key === undefined ? undefined : { delegator: from, key: req.idempotency_key }
      // a turn of a conversation is linked to the one before, in its run and its signed run.started (turns.md)
      created = await this.contexts.withTurn(req, from, ticket.run_id, async (t) => this.create(runOfTicket(ticket, t), {
        delegator: from, capability: req.capability, parent_run: req.parent_run, input: req.input, ticket,
        ...(req.trace === undefined ? {} : { trace: req.trace }),
        ...(t === undefined ? {} : { turn: { context_id: t.context_id, turn: t.turn, previous_turn: t.previous_turn } })
      }, idem, t === undefined ? [] : [contextEntry(t.record)], unique)).catch(async (err: unknown) => { throw (await unique) ?? err })
    } catch (err) {
      this.slots.release(ticket.run_id)
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
  answered (runId: string, delivered: boolean): void {
    this.announceStart(runId)
    const p = this.pendingStart.get(runId)
    if (p === undefined) return // an idempotent retry: the run was started by the first request
    this.pendingStart.delete(runId)
    if (delivered && p.confirm === true && p.handoff !== null) {
      const handoff = p.handoff
      this.confirmations.expect(runId, handoff.from, () => { this.dispatch(runId, p.input, handoff, null) })
      return
    }
    if (delivered || p.recoverable) {
      this.dispatch(runId, p.input, p.handoff, null)
      return
    }
    writeEnding(async () => this.apply(runId, { type: 'fail', code: 'HANDLE_UNDELIVERED', message: 'the run was created but its handle could not be delivered to the caller' }, EXECUTOR), { runId, active: () => this.isActive(runId), signal: this.stopping.signal, log: this.log })
      .catch((err: unknown) => { this.log.warn({ err: toAapError(err), run_id: runId }, 'a run whose handle was never delivered could not be failed') })
  }

  async acceptHandoff (req: WireHandoff, ctx: CallContext): Promise<Run> {
    const from = ctx.peer.toString()
    if (req.to_agent !== this.agentId) throw new AgentNotFoundError(`this node is agent ${this.agentId}, not ${req.to_agent}`)
    // the executor of the old run sends the handoff (also when its delegator asked for it); what the
    // new run inherits is the old run's own ticket, never the sender's claim
    const ticket = checkHandoff(req, from, this.agentId, this.signatures)
    assertInputSize(req.input, 'input')
    assertContextSize(req.context)
    assertServes(this.ownCard(), this.handlers, req.capability, this.agentId)
    // charged to the sender: one that hands off a run many times spends its own share, not the delegator's
    this.slots.take(from, ticket.run_id)
    try {
      await askPolicy(this.policy, { from, task_id: req.task_id, capability: req.capability, input: req.input, signal: ctx.signal }, this.handlerTimeoutMs)
      await this.assertNewRunId(ticket.run_id)
      const run = runOfTicket(ticket)
      const created = await this.create(run, {
        // the input goes on with the run: a successor handed off again passes it on from its own log
        delegator: ticket.delegator, capability: ticket.capability, parent_run: ticket.parent_run, handoff_from: req.from_run, handoff_by: from, input: req.input, context: req.context, ticket, ...(req.trace === undefined ? {} : { trace: req.trace })
      }, undefined)
      this.pendingStart.set(created.run_id, { input: req.input, handoff: { from: req.from_run, context: req.context }, recoverable: false, confirm: true })
      return created
    } catch (err) {
      this.slots.release(ticket.run_id)
      throw err
    }
  }

  /** Phase two of a handoff this node received (see confirmations.ts). */
  async confirmHandoff (req: WireHandoffConfirm, ctx: CallContext): Promise<Run> {
    return this.confirmations.confirm(req.run_id, req.handoff_event, ctx.peer.toString(), async () => this.localRun(req.run_id))
  }

  /** The issuer chose the run id; one that exists already is not taken over. */
  private async assertNewRunId (runId: string): Promise<void> {
    if (this.active.has(runId) || await this.store.has(runId)) {
      throw new InvalidRequestError('the ticket names a run that exists already', { reason: 'run_id_taken' })
    }
  }

  // ---- transitions ------------------------------------------------------------------

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

  /** A stopped node writes nothing more: a handler (or a policy) that outlives stop() would fork the log the next start recovers. */
  private refuseWhenStopping (): void { if (this.stopping.signal.aborted) throw new AapError('INTERNAL', 'this node is stopping: nothing more is committed', { reason: 'stopping' }) }

  /** Store a new run with its run.started event, durable before it is returned. */
  private async create (run: Run, startedPayload: Record<string, unknown>, idem: { delegator: string, key: string } | undefined, extra: Parameters<RunStore['commit']>[3] = [], unique?: Promise<unknown>): Promise<Run> {
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
    // the ticket was checked on the way in: the lineage judge need not check it again
    const ticket = startedPayload.ticket as RunTicket | undefined
    if (ticket !== undefined) rememberTicket(event, ticket)
    const stored: Run = { ...run, last_seq: 1 }
    // the run id must be new here (assertNewRunId, looked up meanwhile) before anything is written
    const taken = await unique
    if (taken !== undefined) throw taken
    this.refuseWhenStopping()
    await this.store.commit(stored, event, idem, extra)
    this.active.set(stored.run_id, { run: stored, last: event, abort: new AbortController(), handlerRunning: false, unannounced: { event, run: stored } })
    return stored
  }

  /**
   * The one way a run changes: under the run's lock, the pure state machine
   * decides, the event is signed and committed with the new state, then the
   * change is announced.
   */
  async apply (runId: string, command: RunCommand, actor: Actor): Promise<Run> {
    return this.locks.run(runId, async () => (await this.commitLocked(runId, command, actor)).run)
  }

  /** `apply` for a caller that already holds the run's lock: the next run and the event that records it. */
  private async commitLocked (runId: string, command: RunCommand, actor: Actor): Promise<{ run: Run, event: AgentEvent }> {
    this.refuseWhenStopping()
    const a = this.active.get(runId)
    const run = a?.run ?? await this.localRun(runId)
    const now = nowIso()
    const outcome = transition(run, command, actor, now)
    if (!outcome.ok) throw outcome.error
    if (command.type === 'block' || command.type === 'resume' || command.type === 'handoff') this.confirmations.refuseUnconfirmed(runId, command.type, run.state)
    if (command.type === 'resume' && a?.blockedAcrossRestart === true && !a.handlerRunning) assertResumable(run, this.handlers.has(capabilityString(run.capability)))
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
    if (a !== undefined) this.afterTransition(runId, a, next, event, command, actor.role !== 'executor')
    this.emit(event, next)
    return { run: next, event }
  }

  /**
   * The working state of an active run follows its committed transition. The
   * handler is told of every block and resume (whoever raised it); a resume
   * starts the handler again only for a run that was blocked across a restart
   * (its first resume since), never a second one beside a live handler, and
   * never a handler that has not started yet (a handoff successor waiting for
   * its confirmation, a run interrupted by the restart that recovery ends).
   */
  private afterTransition (runId: string, a: Active, next: Run, event: AgentEvent, command: RunCommand, byOther: boolean): void {
    a.run = next
    a.last = event
    if (next.state === 'blocked' && a.resumed === undefined) a.resumed = Promise.withResolvers()
    if (command.type === 'block') noteBlocked(this.log, a, event)
    if (command.type === 'resume') {
      const resolution = command.resolution
      const resumed = a.resumed
      a.resumed = undefined
      noteResumed(this.log, a, event)
      if (a.blockedAcrossRestart === true && !a.handlerRunning) {
        // blocked across a restart: the handler starts again with the resolution, from its stored input
        a.blockedAcrossRestart = undefined
        restartResumed(this.side, this.store.log, next, ({ input, handoff }) => { this.dispatch(runId, input, handoff, { checkpoint_id: next.checkpoint_id, resolution }) })
      }
      resumed?.resolve()
    }
    if (isTerminal(next.state)) {
      this.active.delete(runId)
      this.slots.end(runId, a.inHandler === true, byOther)
      a.abort.abort(next.state === 'completed' ? RUN_COMPLETED : RUN_FAILED)
      // handler calls waiting for a resume go on, and the state machine refuses them
      a.resumed?.resolve()
    }
  }

  private emit (event: AgentEvent, run: Run): void {
    for (const l of this.listeners) {
      try {
        l(event, run)
      } catch (err) {
        // a listener never breaks a run: its failure is its own bug, said once per event
        this.log.error({ err, run_id: run.run_id, seq: event.seq }, 'a run event listener threw')
      }
    }
  }

  /** Hand a run this node executes to another agent (handoff.ts). */
  async handoff (runId: string, toAgent: string, context: Record<string, unknown>, actor: Actor, opts: HandoffOptions = {}): Promise<Run> {
    return sendHandoff(this.side, runId, toAgent, context, actor, opts)
  }

  /** What the sending side of a handoff (handoff.ts) and recovery (recovery.ts) use of this executor. */
  get side (): HandoffSide & RecoverySide {
    return {
      agentId: this.agentId,
      key: this.key,
      log: this.log,
      signatures: this.signatures,
      store: this.store,
      client: this.handoffClient,
      resolveCard: this.resolveCard,
      lock: async (runId, fn) => this.locks.run(runId, fn),
      localRun: async (runId) => this.localRun(runId),
      commit: async (runId, command, actor) => this.commitLocked(runId, command, actor),
      refuseUnconfirmed: (runId, state) => { this.confirmations.refuseUnconfirmed(runId, 'handoff', state) },
      head: async (runId) => this.active.get(runId)?.last ?? await this.store.log.head(runId),
      commitForeign: async (runId, event, next) => {
        await this.store.commit(next, event)
        const a = this.active.get(runId)
        if (a !== undefined) this.afterTransition(runId, a, next, event, { type: 'fail', code: 'EXECUTOR_LOST', message: '' }, true)
        this.emit(event, next)
      },
      failLocked: async (runId, code, message) => (await this.commitLocked(runId, { type: 'fail', code, message }, EXECUTOR)).run,
      fail: async (runId, code, message) => this.apply(runId, { type: 'fail', code, message }, EXECUTOR),
      verdictFrom: this.verdictFrom,
      stopping: this.stopping.signal,
      isRunning: (runId) => this.active.get(runId)?.run.state === 'running',
      release: (runId) => { const a = this.active.get(runId); a?.abort.abort(RUN_FAILED); this.active.delete(runId); this.slots.end(runId, a?.inHandler === true, true) }
    }
  }

  private dispatch (runId: string, input: Record<string, unknown>, handoff: RunContext['handedOff'], restored: RunContext['restored']): void {
    const a = this.active.get(runId)
    if (a === undefined) return
    startHandler(this, runId, a, this.handlers.get(capabilityString(a.run.capability)), input, handoff, restored)
  }
}
