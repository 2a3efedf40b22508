/**
 * The run service of a node: `agent.delegate`, `agent.block`, `agent.resume`,
 * `agent.handoff` (plus get-run and cancel). It joins the two sides of the
 * run protocols: the caller (caller.ts), which asks a run's executor, and the
 * executor (executor.ts), which serves the protocols and moves the runs this
 * node executes through the state machine. A verb on a run this node executes
 * goes straight to the executor; any other goes over the wire.
 */
import type { PrivateKey } from '@libp2p/interface'
import type { Datastore } from 'interface-datastore'
import { componentLogger, type Logger } from '../logger.ts'
import type { AgentCard, CapabilityRef } from '../card/card.ts'
import { MAX_CONCURRENT_INBOUND_RUNS, MAX_HANDOFF_DEPTH } from '../constants.ts'
import { agentIdOf } from '../identity/identity.ts'
import { InvalidTransitionError, toAapError } from '../errors.ts'
import { executorOfRun, SignatureCache } from '../runlog/event.ts'
import { issueDelegationTicket, type RunTicket } from '../runlog/ticket.ts'
import { grantFits, signResumeGrant } from '../runlog/resume-grant.ts'
import { handoffTarget } from '../runlog/handoff.ts'
import { isTerminal, type AgentEvent, type Run } from '../runlog/types.ts'
import type { MeshHost } from '../wire/host.ts'
import type { CallOptions } from '../wire/rpc.ts'
import { tagRunPeer } from '../wire/budget.ts'
import { heldPeerRecord } from '../wire/peer-records.ts'
import { RunCaller, type ControlVerb } from './caller.ts'
import { peerOf } from './peers.ts'
import type { ConfirmationPorts, ConfirmationStats } from './confirmations.ts'
import { RunExecutor } from './executor.ts'
import { assertAgentIdShape, assertPayloadValueDepth, assertRunIdShape, isBlock, isCancel, isControlHandoff, isGetRun, isResume, refusedNewMember, resumeBody, resumeCommand } from './messages.ts'
import { LivenessMonitor, type LivenessOptions } from './liveness.ts'
import type { PageRequest, RunCounts, RunFilter } from './run-index.ts'
import { RunStore } from './store.ts'
import { Successors, type SuccessorStats } from './successors.ts'
import { IdempotencySweeper } from './idempotency-sweeper.ts'
import { BlockedOrphans } from './orphans.ts'
import type { RunSlots } from './slots.ts'
import { inSpan, parentOf, RecentTraces } from './trace.ts'
import type { ArtifactWriter } from '../artifacts/types.ts'
import type { Actor, DelegateRequest, DelegationPolicy, ResumeOptions, RunEventListener, RunHandler } from './types.ts'
import { checkpointMismatchError } from './state-machine.ts'

export type { Conversation, DelegateRequest, DelegationPolicy, ResumeOptions, RunContext, RunEventListener, RunHandler, TurnView } from './types.ts'
export { isRun } from './messages.ts'
export type { PageRequest, RunCounts, RunFilter } from './run-index.ts'
export type { TraceContext } from './trace.ts'

/** A page of a listing (Runs.list), with the node's runs counted by side and state (all of them, not the page's). */
export interface RunList { executing: Run[], delegated: Run[], next_cursor: string | null, counts: RunCounts }

export interface RunsInit {
  host: MeshHost
  privateKey: PrivateKey
  datastore: Datastore
  /** Verified card of an agent (cache, peer, DHT); AGENT_NOT_FOUND when it cannot be had. */
  resolveCard: (agentId: string, opts?: { signal?: AbortSignal, offered?: unknown, wants?: (card: AgentCard) => boolean }) => Promise<AgentCard>
  /** A verified card of the agent this node holds now, without asking anyone (sent with a handoff). */
  knownCard?: (agentId: string) => AgentCard | undefined
  /** This node's own card, for the capability check on inbound work. */
  ownCard: () => AgentCard | undefined
  /** Runs (running or blocked) this node executes at once before it refuses more (default MAX_CONCURRENT_INBOUND_RUNS). */
  maxConcurrentInboundRuns?: number
  /** Of those, the most one delegator may hold (default: a quarter of the limit, rounded up, at most MAX_INBOUND_RUNS_PER_DELEGATOR). */
  maxInboundRunsPerDelegator?: number
  /** The node's logger (this service logs as component `runs`). */
  logger?: Logger
  /** How long a run handed to this node waits for the sender's confirmation (default HANDOFF_CONFIRM_TIMEOUT_MS). */
  handoffConfirmTimeoutMs?: number
  /** Each request's budget on the run protocols (default HANDLER_TIMEOUT_MS). */
  handlerTimeoutMs?: number
  /** When a delegator declares the executor of its live runs lost (liveness.ts). */
  liveness?: LivenessOptions
  /** Where a handler's `ctx.artifact` stores its bytes. */
  artifacts?: ArtifactWriter
  /** The node's verified-signature cache (default: one of this service's own). */
  signatures?: SignatureCache
  /** A run this node delegated was handed off, and its successor is now recorded here too (the node follows it). */
  onSuccessor?: (run: Run) => void
}

const EXECUTOR: Actor = { role: 'executor' }

export class Runs {
  readonly agentId: string
  readonly store: RunStore
  private readonly key: PrivateKey
  private readonly caller: RunCaller
  private readonly executor: RunExecutor
  private readonly knownCard: RunsInit['knownCard']
  private readonly host: MeshHost
  /** Trace contexts of this node's delegations, for control calls on runs it does not follow (trace.ts). */
  private readonly traces = new RecentTraces()
  private readonly log: Logger
  /** The delegator's watch on the executors of its live runs (protocols/liveness.md). */
  readonly liveness: LivenessMonitor
  /** Records the successors of the runs this node delegated that were handed off. */
  private readonly successors: Successors
  /** Deletes expired idempotency records. */
  readonly idempotency: IdempotencySweeper
  /** The executor's watch on the delegators of the runs it holds blocked (orphans.ts). */
  readonly orphans: BlockedOrphans

  constructor (init: RunsInit) {
    this.agentId = agentIdOf(init.privateKey)
    this.key = init.privateKey
    const log = componentLogger(init.logger, 'runs')
    this.store = new RunStore(init.datastore, log, this.agentId)
    const signatures = init.signatures ?? new SignatureCache()
    this.knownCard = init.knownCard
    this.host = init.host
    this.log = log
    this.caller = new RunCaller({ host: init.host, privateKey: init.privateKey, agentId: this.agentId, store: this.store, resolveCard: init.resolveCard, log, signatures })
    this.executor = new RunExecutor({
      host: init.host,
      privateKey: init.privateKey,
      agentId: this.agentId,
      store: this.store,
      resolveCard: init.resolveCard,
      ownCard: init.ownCard,
      maxConcurrentInboundRuns: init.maxConcurrentInboundRuns ?? MAX_CONCURRENT_INBOUND_RUNS,
      ...(init.maxInboundRunsPerDelegator === undefined ? {} : { maxInboundRunsPerDelegator: init.maxInboundRunsPerDelegator }),
      log,
      ...(init.handoffConfirmTimeoutMs === undefined ? {} : { handoffConfirmTimeoutMs: init.handoffConfirmTimeoutMs }),
      ...(init.handlerTimeoutMs === undefined ? {} : { handlerTimeoutMs: init.handlerTimeoutMs }),
      getRemoteRun: async (runId) => this.caller.control(runId, 'get_run', { run_id: runId }, {}),
      verdictFrom: async (delegator, runId, opts) => this.caller.verdictFrom(delegator, runId, opts),
      contextData: init.datastore,
      signatures,
      ...(init.artifacts === undefined ? {} : { artifacts: init.artifacts })
    })
    this.successors = new Successors({ store: this.store, caller: this.caller, log, onSuccessor: init.onSuccessor })
    this.orphans = new BlockedOrphans({
      agentId: this.agentId,
      host: init.host,
      log,
      ...(init.liveness?.blockedOrphanAfterMs === undefined ? {} : { blockedOrphanAfterMs: init.liveness.blockedOrphanAfterMs }),
      ...(init.liveness?.blockedCheckIntervalMs === undefined ? {} : { blockedCheckIntervalMs: init.liveness.blockedCheckIntervalMs }),
      blocked: () => this.store.live('executing'),
      ask: async (agent, runId, opts) => this.caller.askDelegator(agent, runId, opts),
      adoptVerdict: async (runId, verdict, peer) => this.executor.adoptVerdict(runId, verdict, peer),
      failBlocked: async (runId, code, message, still) => {
        // on the run's lock: a resume that came first wins, and the run is failed only while it is still blocked
        const side = this.executor.side
        return side.lock(runId, async () => {
          const run = await side.localRun(runId)
          return run.state === 'blocked' && still(run) ? side.failLocked(runId, code, message) : undefined
        })
      }
    })
    this.idempotency = new IdempotencySweeper(this.store, log)
    this.liveness = new LivenessMonitor({
      host: init.host,
      agentId: this.agentId,
      key: init.privateKey,
      store: this.store,
      log,
      ...init.liveness,
      probe: async (runId, opts) => {
        const run = await this.caller.control(runId, 'get_run', { run_id: runId }, opts)
        // an executor with live runs keeps its connection (budget.ts); each answered probe renews the tag
        tagRunPeer(init.host, peerOf(executorOfRun(runId)), log)
        return run
      },
      notify: async (runId, verdict, opts) => this.caller.control(runId, 'executor_lost', { run_id: runId, verdict }, opts)
    })
  }

  /** Successors kept from a handoff's link alone, refused, and asked after at a start (successors.ts). */
  get successorStats (): SuccessorStats {
    return this.successors.stats
  }

  /** Successors of forked runs ended here, and runs a fork named that did not continue the forked run (left alone). */
  readonly forkStats = { ended: 0, namedOther: 0 }

  /**
   * The executor of a run signed two events of it at one seq, or an ending
   * below its head (src/events/forks.ts): where this node is the run's
   * delegator, every successor either event hands off to that continues the
   * run is ended (endLine), so no task line goes on from a fork
   * (protocols/handoff.md, Forks). Never rejects.
   */
  async settleFork (events: AgentEvent[]): Promise<void> {
    const runId = events[0]?.run_id ?? ''
    try {
      if ((await this.store.getOutgoing(runId))?.delegator !== this.agentId) return
    } catch (err) {
      this.log.error({ err: toAapError(err), run_id: runId }, 'the record of a forked run could not be read: its successors are not canceled')
      return
    }
    for (const e of events) {
      const to = handoffTarget(e)
      if (to !== null) await this.endLine(to.run_id, runId, 0)
    }
  }

  /**
   * End `runId` if it continues `from` (its own record says so: an event can
   * name any run, and a forged one named another task's run to have it
   * canceled), or, where it handed off already, the run it handed on to,
   * MAX_HANDOFF_DEPTH hops at most. Never rejects.
   */
  private async endLine (runId: string, from: string, hops: number): Promise<void> {
    const why = 'its predecessor was handed off twice: the task line forked'
    try {
      const run = await this.getRun(runId)
      if (run.handoff_from?.run_id !== from) {
        this.forkStats.namedOther++
        this.log.warn({ run_id: runId, forked: from }, 'a fork names a run that does not continue the forked run: left alone')
        return
      }
      if (run.handoff_to !== null && hops < MAX_HANDOFF_DEPTH) return await this.endLine(run.handoff_to.run_id, runId, hops + 1)
      if (isTerminal(run.state)) return
      // a successor this node executes is failed by it (a cancel is the delegator's, on another node)
      if (this.isLocal(runId)) await this.executor.apply(runId, { type: 'fail', code: 'CANCELED', message: why }, EXECUTOR)
      else await this.cancel(runId, why)
      this.forkStats.ended++
    } catch (err) {
      this.log.warn({ err: toAapError(err), run_id: runId, forked: from }, 'a successor of a forked run could not be ended')
    }
  }

  async start (): Promise<void> {
    await this.store.open()
    await this.executor.start()
    await this.liveness.start()
    this.orphans.start()
    this.idempotency.start()
    this.successors.start()
  }

  /** Asks after handoff confirmations that did not come, and what they decided (confirmations.ts). */
  get handoffConfirmations (): ConfirmationStats {
    return this.executor.confirmations.stats
  }

  /** Give the handoff confirmations the events service's part (the node wires it once both exist). */
  connectConfirmations (ports: ConfirmationPorts): void {
    this.executor.confirmations.connect(ports)
  }

  /** The executor's run slots: held now, and new runs refused for want of one (slots.ts). */
  get slots (): RunSlots {
    return this.executor.slots
  }

  /**
   * Resolves once restart recovery has settled the runs that were executing
   * when the node last stopped: each ended with its delegator's liveness
   * verdict or with EXECUTOR_RESTARTED (src/runs/recovery.ts). Recovery asks
   * the delegators over the network, so `start` does not wait for it.
   */
  async recovered (): Promise<void> {
    await this.executor.recovered()
  }

  async stop (): Promise<void> {
    await this.successors.stop()
    await this.idempotency.stop()
    await this.liveness.stop()
    await this.orphans.stop()
    this.caller.close()
    await this.executor.stop()
    await this.store.flushOutgoing()
    await this.store.refused.stop()
  }

  // ---- the agent's side ---------------------------------------------------------------

  /** Serve a capability with an in-process handler. The card must declare it to receive work. */
  handle (capability: CapabilityRef, handler: RunHandler): void {
    this.executor.handle(capability, handler)
  }

  unhandle (capability: CapabilityRef): void {
    this.executor.unhandle(capability)
  }

  /** Whether an in-process handler serves the capability now. */
  handles (capability: CapabilityRef): boolean {
    return this.executor.handles(capability)
  }

  setPolicy (policy: DelegationPolicy | undefined): void {
    this.executor.setPolicy(policy)
  }

  /** Every event this node commits for runs it executes, after it is durable. */
  onEvent (listener: RunEventListener): () => void {
    return this.executor.onEvent(listener)
  }

  // ---- the verbs ------------------------------------------------------------------------

  /** `agent.delegate`: returns the Run handle once the executor has stored it; never waits for the work. */
  async delegate (req: DelegateRequest, opts: CallOptions = {}): Promise<Run> {
    assertAgentIdShape(req.to_agent)
    if (req.parent_run != null && this.isLocal(req.parent_run)) await this.assertParentWorks(req.parent_run)
    const parent = await parentOf(req.trace, this.store.log, req.parent_run)
    const attributes = { 'aap.agent_id': this.agentId, 'aap.to_agent': req.to_agent, 'aap.correlation_id': req.task_id }
    return inSpan('aap.delegate', 'client', parent, attributes, async (trace) => {
      const run = await this.caller.delegate(req, opts, trace)
      this.traces.remember(run.run_id, trace)
      return run
    })
  }

  /**
   * Work is delegated under a run of this node's only while that run works:
   * a child started under a blocked run would go on past a checkpoint nobody
   * resolved, and one under an ended run past its cancel or its end (an
   * ended run is read-only). A parent this node does not hold is left to the
   * receiver, which checks the sender executes it.
   */
  private async assertParentWorks (runId: string): Promise<void> {
    const run = await this.executor.localRun(runId).catch((err: unknown) => {
      if (toAapError(err).code === 'RUN_NOT_FOUND') return undefined
      throw err
    })
    if (run === undefined || run.state === 'running') return
    throw new InvalidTransitionError(`cannot delegate under run ${runId} in state ${run.state}: ${run.state === 'blocked' ? `it waits on checkpoint ${run.checkpoint_id ?? ''}` : 'it has ended'}`, {
      run_id: runId, state: run.state, command: 'delegate', reason: 'parent_not_running'
    })
  }

  /**
   * A delegation ticket signed by this node for `req` (the run id is in it):
   * for callers that build their own delegate frames (raw wire tests,
   * conformance kits). `delegate` issues its own.
   */
  async ticketFor (req: DelegateRequest): Promise<RunTicket> {
    return issueDelegationTicket(this.key, {
      executor: req.to_agent, correlation_id: req.task_id, capability: req.capability, parent_run: req.parent_run ?? null, authorized: req.authorized ?? []
    })
  }

  /** `agent.block`: the executor blocks its own run; the delegator blocks a run it delegated. */
  async block (runId: string, reason: string, checkpointId: string, opts: CallOptions = {}): Promise<Run> {
    const body = { run_id: runId, reason, checkpoint_id: checkpointId }
    assertRunIdShape(runId)
    isBlock.assert(body, 'block request')
    if (this.isLocal(runId)) return this.executor.apply(runId, { type: 'block', reason, checkpoint_id: checkpointId }, EXECUTOR)
    return this.control(runId, 'block', body, opts)
  }

  /**
   * `agent.resume`: only the delegator or an agent it authorized; a run never resumes itself. With
   * `opts.checkpointId` it resolves that checkpoint only (INVALID_TRANSITION, reason checkpoint_mismatch, when
   * the run is not blocked on it).
   */
  async resume (runId: string, resolution: Record<string, unknown>, opts: ResumeOptions = {}): Promise<Run> {
    const { checkpointId, ...call } = opts
    const body = resumeBody(runId, resolution, checkpointId)
    assertRunIdShape(runId)
    isResume.assert(body, 'resume request')
    assertPayloadValueDepth(resolution, 'resolution')
    if (this.isLocal(runId)) return this.executor.apply(runId, resumeCommand(resolution, checkpointId), EXECUTOR)
    // signed, so the resolution in the executor's event is this agent's own word for whoever reads the log
    const granted = { run_id: runId, checkpoint_id: checkpointId ?? null, resolution }
    const grant = grantFits(granted, this.agentId) ? await signResumeGrant(this.key, granted) : undefined
    if (grant === undefined) this.log.info({ run_id: runId }, 'the resolution leaves the resume event no room for a grant: resumed without one')
    try {
      return await this.control(runId, 'resume', resumeBody(runId, resolution, checkpointId, grant), call)
    } catch (err) {
      if (!refusedNewMember(err)) throw err
    }
    // an executor from before grants: the same resume without one (its event shows the resolution unattested)
    this.log.info({ run_id: runId }, 'the executor predates resume grants: resumed without one')
    if (checkpointId === undefined) return this.control(runId, 'resume', body, call)
    try {
      return await this.control(runId, 'resume', body, call)
    } catch (err) {
      if (!refusedNewMember(err)) throw err
    }
    return this.resumeOlder(runId, resolution, checkpointId, call)
  }

  /**
   * A resume naming its checkpoint, for an executor from before resumes
   * could name one (it refuses the member): the run is read first, and
   * resumed without the member only while it is blocked on that checkpoint.
   * Between the read and the resume another owner could resume the run and
   * it block again; that window is what such an executor leaves.
   */
  private async resumeOlder (runId: string, resolution: Record<string, unknown>, checkpointId: string, opts: CallOptions): Promise<Run> {
    const run = await this.control(runId, 'get_run', { run_id: runId }, opts)
    if (run.state !== 'blocked' || run.checkpoint_id !== checkpointId) throw checkpointMismatchError(run, checkpointId)
    this.log.info({ run_id: runId, checkpoint_id: checkpointId }, 'the executor predates resumes that name their checkpoint: resumed after reading it is still blocked on it')
    return this.control(runId, 'resume', resumeBody(runId, resolution), opts)
  }

  /** Extension: end a run in `failed` with reason `canceled` (delegator or authorized only). */
  async cancel (runId: string, reason = 'canceled by delegator', opts: CallOptions = {}): Promise<Run> {
    const body = { run_id: runId, reason }
    assertRunIdShape(runId)
    isCancel.assert(body, 'cancel request')
    if (this.isLocal(runId)) return this.executor.apply(runId, { type: 'cancel', reason }, EXECUTOR)
    return this.control(runId, 'cancel', body, opts)
  }

  /**
   * `agent.handoff`: a new run on `toAgent` with the same correlation_id; the
   * old run becomes read-only. The receiver's card goes with the request when
   * this node holds it, so the executor does not fetch it, and so does the
   * receiver's signed peer record (src/wire/peer-records.ts), so the executor
   * need not look the receiver up before it dials it.
   */
  async handoff (runId: string, toAgent: string, context: Record<string, unknown>, opts: CallOptions = {}): Promise<Run> {
    const card = this.knownCard?.(toAgent)
    const body = { run_id: runId, to_agent: toAgent, context, ...(card === undefined ? {} : { to_card: card }) }
    assertRunIdShape(runId)
    assertAgentIdShape(toAgent)
    isControlHandoff.assert(body, 'handoff request')
    if (this.isLocal(runId)) return this.executor.handoff(runId, toAgent, context, EXECUTOR, { ...opts, ...(card === undefined ? {} : { card }) })
    // an executor elsewhere dials the receiver: its record is bounded and checked where it is read (peer-records.ts)
    const record = await heldPeerRecord(this.host, peerOf(toAgent), this.log)
    return this.control(runId, 'handoff', record === undefined ? body : { ...body, to_record: record }, opts)
  }

  /** The run as its executor knows it (RUN_NOT_FOUND if it does not exist). */
  async getRun (runId: string, opts: CallOptions = {}): Promise<Run> {
    assertRunIdShape(runId)
    isGetRun.assert({ run_id: runId }, 'run id')
    if (this.isLocal(runId)) return this.executor.localRun(runId)
    return this.control(runId, 'get_run', { run_id: runId }, opts)
  }

  /**
   * One page of the runs this node executes and the runs it delegated (its
   * last known view of them), read from the run index (run-index.ts).
   * `next_cursor` continues the listing with the same filter; null at the end.
   */
  async list (filter: RunFilter = {}, page: PageRequest = {}): Promise<RunList> {
    // the delegator's records handed over before this call are listed
    await this.store.flushOutgoing()
    const found = await this.store.page(filter, page)
    return { executing: found.executing.map(r => this.executor.current(r)), delegated: found.delegated, next_cursor: found.next_cursor, counts: this.counts() }
  }

  /** Runs by side and state, as the index counts them (no datastore read). */
  counts (): RunCounts {
    return this.store.index.counts()
  }

  /** A control verb sent to the run's executor, in a client span that carries the run's trace context. */
  private async control (runId: string, verb: ControlVerb, body: object, opts: CallOptions): Promise<Run> {
    const parent = await parentOf(undefined, this.store.log, runId, this.traces)
    return inSpan(`aap.control.${verb}`, 'client', parent, { 'aap.agent_id': this.agentId, 'aap.run_id': runId },
      async (trace) => this.caller.control(runId, verb, trace === undefined ? body : { ...body, trace }, opts))
  }

  /** Whether this node executes the run (its id names this agent). */
  isLocal (runId: string): boolean {
    return executorOfRun(runId) === this.agentId
  }
}
