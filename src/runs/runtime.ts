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
import { MAX_CONCURRENT_INBOUND_RUNS } from '../constants.ts'
import { agentIdOf } from '../identity/identity.ts'
import { executorOfRun } from '../runlog/event.ts'
import { issueDelegationTicket, type RunTicket } from '../runlog/ticket.ts'
import type { Run } from '../runlog/types.ts'
import type { MeshHost } from '../wire/host.ts'
import type { CallOptions } from '../wire/rpc.ts'
import { RunCaller } from './caller.ts'
import { RunExecutor } from './executor.ts'
import { isBlock, isCancel, isControlHandoff, isGetRun, isResume } from './messages.ts'
import { RunStore } from './store.ts'
import type { ArtifactWriter } from '../artifacts/types.ts'
import type { Actor, DelegateRequest, DelegationPolicy, RunEventListener, RunHandler } from './types.ts'

export type { DelegateRequest, DelegationPolicy, RunContext, RunEventListener, RunHandler } from './types.ts'
export { isRun } from './messages.ts'

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
  /** The node's logger (this service logs as component `runs`). */
  logger?: Logger
  /** How long a run handed to this node waits for the sender's confirmation (default HANDOFF_CONFIRM_TIMEOUT_MS). */
  handoffConfirmTimeoutMs?: number
  /** Where a handler's `ctx.artifact` stores its bytes. */
  artifacts?: ArtifactWriter
}

const EXECUTOR: Actor = { role: 'executor' }

export class Runs {
  readonly agentId: string
  readonly store: RunStore
  private readonly key: PrivateKey
  private readonly caller: RunCaller
  private readonly executor: RunExecutor

  constructor (init: RunsInit) {
    this.agentId = agentIdOf(init.privateKey)
    this.key = init.privateKey
    this.store = new RunStore(init.datastore)
    const log = componentLogger(init.logger, 'runs')
    this.caller = new RunCaller({ host: init.host, privateKey: init.privateKey, agentId: this.agentId, store: this.store, resolveCard: init.resolveCard, log })
    this.executor = new RunExecutor({
      host: init.host,
      privateKey: init.privateKey,
      agentId: this.agentId,
      store: this.store,
      resolveCard: init.resolveCard,
      ownCard: init.ownCard,
      maxConcurrentInboundRuns: init.maxConcurrentInboundRuns ?? MAX_CONCURRENT_INBOUND_RUNS,
      log,
      ...(init.handoffConfirmTimeoutMs === undefined ? {} : { handoffConfirmTimeoutMs: init.handoffConfirmTimeoutMs }),
      getRemoteRun: async (runId) => this.caller.control(runId, 'get_run', { run_id: runId }, {}),
      ...(init.artifacts === undefined ? {} : { artifacts: init.artifacts })
    })
  }

  async start (): Promise<void> {
    await this.executor.start()
  }

  async stop (): Promise<void> {
    this.caller.close()
    await this.executor.stop()
    await this.store.flushOutgoing()
  }

  // ---- the agent's side ---------------------------------------------------------------

  /** Serve a capability with an in-process handler. The card must declare it to receive work. */
  handle (capability: CapabilityRef, handler: RunHandler): void {
    this.executor.handle(capability, handler)
  }

  unhandle (capability: CapabilityRef): void {
    this.executor.unhandle(capability)
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
    return this.caller.delegate(req, opts)
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
    isBlock.assert(body, 'block request')
    if (this.isLocal(runId)) return this.executor.apply(runId, { type: 'block', reason, checkpoint_id: checkpointId }, EXECUTOR)
    return this.caller.control(runId, 'block', body, opts)
  }

  /** `agent.resume`: only the delegator or an agent it authorized; a run never resumes itself. */
  async resume (runId: string, resolution: Record<string, unknown>, opts: CallOptions = {}): Promise<Run> {
    const body = { run_id: runId, resolution }
    isResume.assert(body, 'resume request')
    if (this.isLocal(runId)) return this.executor.apply(runId, { type: 'resume', resolution }, EXECUTOR)
    return this.caller.control(runId, 'resume', body, opts)
  }

  /** Extension: end a run in `failed` with reason `canceled` (delegator or authorized only). */
  async cancel (runId: string, reason = 'canceled by delegator', opts: CallOptions = {}): Promise<Run> {
    const body = { run_id: runId, reason }
    isCancel.assert(body, 'cancel request')
    if (this.isLocal(runId)) return this.executor.apply(runId, { type: 'cancel', reason }, EXECUTOR)
    return this.caller.control(runId, 'cancel', body, opts)
  }

  /** `agent.handoff`: a new run on `toAgent` with the same correlation_id; the old run becomes read-only. */
  async handoff (runId: string, toAgent: string, context: Record<string, unknown>, opts: CallOptions = {}): Promise<Run> {
    const body = { run_id: runId, to_agent: toAgent, context }
    isControlHandoff.assert(body, 'handoff request')
    if (this.isLocal(runId)) return this.executor.handoff(runId, toAgent, context, EXECUTOR, opts)
    return this.caller.control(runId, 'handoff', body, opts)
  }

  /** The run as its executor knows it (RUN_NOT_FOUND if it does not exist). */
  async getRun (runId: string, opts: CallOptions = {}): Promise<Run> {
    isGetRun.assert({ run_id: runId }, 'run id')
    if (this.isLocal(runId)) return this.executor.localRun(runId)
    return this.caller.control(runId, 'get_run', { run_id: runId }, opts)
  }

  /** Runs this node executes and runs it delegated (its last known view of them). */
  async list (filter: { state?: string, correlation_id?: string } = {}): Promise<{ executing: Run[], delegated: Run[] }> {
    const match = (r: Run): boolean => (filter.state === undefined || r.state === filter.state) &&
      (filter.correlation_id === undefined || r.correlation_id === filter.correlation_id)
    const executing: Run[] = []
    for await (const r of this.store.all()) if (match(r)) executing.push(this.executor.current(r))
    const delegated: Run[] = []
    for await (const r of this.store.allOutgoing()) if (match(r)) delegated.push(r)
    return { executing, delegated }
  }

  /** Whether this node executes the run (its id names this agent). */
  isLocal (runId: string): boolean {
    return executorOfRun(runId) === this.agentId
  }
}
