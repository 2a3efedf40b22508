/**
 * The caller's side of the run protocols: `agent.delegate` and the control
 * verbs (block, resume, cancel, handoff, get_run) sent to a run's executor.
 * The executor named by the run id answers; this side only checks that what
 * comes back is the run it asked about, and keeps the delegator's record of
 * the runs it started (RunStore's outgoing records).
 */
import type { PrivateKey } from '@libp2p/interface'
import type { Logger } from '../logger.ts'
import { capabilityString, supports, type AgentCard } from '../card/card.ts'
import { CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL, DELEGATE_MAX_FRAME_BYTES, DELEGATE_PROTOCOL } from '../constants.ts'
import { CapabilityNotSupportedError, DelegationRefusedError, InvalidRequestError, RunNotFoundError, toAapError } from '../errors.ts'
import { executorOfRun, verifyEventSync, type SignatureCache } from '../runlog/event.ts'
import { issueDelegationTicket } from '../runlog/ticket.ts'
import type { AgentEvent, Run } from '../runlog/types.ts'
import type { MeshHost } from '../wire/host.ts'
import { tagRunPeer } from '../wire/budget.ts'
import { RpcClient, type CallOptions } from '../wire/rpc.ts'
import { FRESH_RUN } from './admission.ts'
import { assertInputSize, isGetVerdictResponse, isRun, isWireDelegate, type WireDelegate } from './messages.ts'
import { peerOf } from './peers.ts'
import type { RunStore } from './store.ts'
import type { TraceContext } from './trace.ts'
import type { DelegateRequest } from './types.ts'
import type { DelegatorAnswer } from './orphans.ts'

export type ControlVerb = 'block' | 'resume' | 'cancel' | 'handoff' | 'get_run' | 'executor_lost'

export interface RunCallerInit {
  host: MeshHost
  privateKey: PrivateKey
  agentId: string
  store: RunStore
  /** `wants`: what the caller needs of the card (a cached one that lacks it is fetched again, see Discovery.getCard). */
  resolveCard: (agentId: string, opts?: { signal?: AbortSignal, wants?: (card: AgentCard) => boolean }) => Promise<AgentCard>
  log: Logger
  /** The node's verified-signature cache (src/runlog/event.ts), shared with no other node. */
  signatures: SignatureCache
}

/** The run in an executor's answer, checked to be a run of the agent that was asked. */
export function runFromAnswer (res: Record<string, unknown>, expectAgent: string | undefined): Run {
  const run = isRun.assert(res.run, 'run from peer')
  if (expectAgent !== undefined && (run.agent_id !== expectAgent || executorOfRun(run.run_id) !== expectAgent)) {
    throw new InvalidRequestError('peer answered with a run of another agent')
  }
  return run
}

export class RunCaller {
  private readonly agentId: string
  private readonly host: MeshHost
  private readonly key: PrivateKey
  private readonly store: RunStore
  private readonly resolveCard: RunCallerInit['resolveCard']
  private readonly log: Logger
  private readonly signatures: SignatureCache
  private readonly delegateClient: RpcClient
  private readonly controlClient: RpcClient

  constructor (init: RunCallerInit) {
    this.agentId = init.agentId
    this.host = init.host
    this.key = init.privateKey
    this.store = init.store
    this.resolveCard = init.resolveCard
    this.signatures = init.signatures
    this.log = init.log
    this.delegateClient = new RpcClient(init.host, { protocol: DELEGATE_PROTOCOL, maxFrameBytes: DELEGATE_MAX_FRAME_BYTES, log: init.log })
    this.controlClient = new RpcClient(init.host, { protocol: CONTROL_PROTOCOL, maxFrameBytes: CONTROL_MAX_FRAME_BYTES, log: init.log })
  }

  /** Ends every stream this side opened (calls in flight fail at once). */
  close (): void {
    this.delegateClient.close()
    this.controlClient.close()
  }

  /** `agent.delegate`: returns the Run handle once the executor has stored it; never waits for the work. */
  async delegate (req: DelegateRequest, opts: CallOptions = {}, trace?: TraceContext): Promise<Run> {
    const parentRun = req.parent_run ?? null
    const authorized = req.authorized ?? []
    const ticket = await issueDelegationTicket(this.key, {
      executor: req.to_agent, correlation_id: req.task_id, capability: req.capability, parent_run: parentRun, authorized
    })
    const body: WireDelegate = {
      to_agent: req.to_agent,
      task_id: req.task_id,
      capability: req.capability,
      input: req.input,
      parent_run: req.parent_run ?? null,
      ...(req.idempotency_key === undefined ? {} : { idempotency_key: req.idempotency_key }),
      ...(req.authorized === undefined ? {} : { authorized: req.authorized }),
      ...(req.continue_run === undefined ? {} : { continue_run: req.continue_run }),
      ...(req.context_id === undefined ? {} : { context_id: req.context_id }),
      ticket,
      ...(trace === undefined ? {} : { trace })
    }
    isWireDelegate.assert(body, 'delegate request')
    assertInputSize(body.input, 'input')
    if (req.to_agent === this.agentId) throw new DelegationRefusedError('an agent does not delegate to itself; a blocked run must be resumed by another agent')
    const peer = peerOf(req.to_agent)
    const card = await this.resolveCard(req.to_agent, { ...(opts.signal === undefined ? {} : { signal: opts.signal }), wants: c => supports(c, req.capability) })
    if (!supports(card, req.capability)) {
      throw new CapabilityNotSupportedError(`agent ${req.to_agent} does not declare ${capabilityString(req.capability)}`, { capability: req.capability })
    }
    const res = await this.delegateClient.call(peer, 'delegate', body, {
      ...opts,
      onLateAnswer: (late) => {
        this.lateDelegation(late, body).catch((err: unknown) => {
          this.log.warn({ err: toAapError(err), task_id: body.task_id }, 'a run created after its delegation gave up could not be canceled or recorded')
        })
      }
    })
    const run = runFromAnswer(res, req.to_agent)
    // the run this delegation made (or, for a key's retry, the one its first request made): never another delegator's
    // run, another task's, nor for a new request another run than its ticket names
    if (!this.ours(run, req.task_id) || (req.idempotency_key === undefined && run.run_id !== ticket.run_id)) {
      throw new InvalidRequestError(`agent ${req.to_agent} answered the delegation with another run (${run.run_id.slice(0, 160)})`, { reason: 'ticket_mismatch' })
    }
    // the executor's connection carries the run's control and events: the budget keeps it
    tagRunPeer(this.host, peer, this.log)
    // the handle is durable where it counts (the executor committed the run before answering);
    // the delegator's own record is readable at once and written behind (see RunStore.putOutgoing)
    // without an idempotency key the executor created the run just now: no earlier record to look up
    // a retried key may answer with a run whose record here has moved on already: never write it back
    const recorded = req.idempotency_key === undefined ? this.store.putOutgoing(run, true) : this.store.noteOutgoing(run)
    recorded.catch((err: unknown) => {
      this.log.warn({ err, run_id: run.run_id }, "the delegator's record of a run could not be written (the run itself is safe at its executor)")
    })
    return run
  }

  /** A run this node delegated for `task` (what an executor answers a delegation with must be). */
  private ours (run: Run, task: string): boolean {
    return run.delegator === this.agentId && run.correlation_id === task
  }

  /**
   * The executor created a run, but its handle came after this delegate gave
   * up. Without an idempotency key the caller cannot learn about it again, so
   * the run is canceled (the executor emits run.failed); with one, a retry
   * returns it, so it is only recorded.
   */
  private async lateDelegation (late: Record<string, unknown>, body: WireDelegate): Promise<void> {
    const run = runFromAnswer(late, body.to_agent)
    if (!this.ours(run, body.task_id)) return
    if (body.idempotency_key !== undefined) {
      await this.store.noteOutgoing(run)
      return
    }
    this.log.info({ run_id: run.run_id }, 'canceling a run whose handle arrived after the delegation gave up')
    await this.control(run.run_id, 'cancel', { run_id: run.run_id, reason: 'the delegator stopped waiting for the run handle before it arrived' }, {})
  }

  /** A control verb sent to the run's executor (named by the run id). */
  async control (runId: string, verb: ControlVerb, body: object, opts: CallOptions): Promise<Run> {
    const executor = executorOfRun(runId)
    if (executor === '') throw new RunNotFoundError(`"${runId.slice(0, 80)}" is not a run id`)
    let peer
    try {
      peer = peerOf(executor)
    } catch {
      // the part before ':' is not an agent id: no executor can hold this run
      throw new RunNotFoundError(`"${runId.slice(0, 80)}" is not a run id`)
    }
    const res = await this.controlClient.call(peer, verb, body, opts)
    if (verb === 'handoff') {
      // the new run, on the agent the run was handed to, continuing this one
      const to = (body as { to_agent?: unknown }).to_agent
      const next = runFromAnswer(res, typeof to === 'string' ? to : '')
      await this.noteSuccessor(next, runId)
      return next
    }
    // the run asked about, as its own executor holds it: an answer about another run would rewrite that run's record here
    const run = runFromAnswer(res, executor)
    if (run.run_id !== runId) throw new InvalidRequestError('the executor answered with another run than the one asked about')
    // only a record this node made when it delegated moves: a stranger's answer naming this node its delegator
    // (a get_run prompted by any run id, or by a handoff never confirmed) made a record liveness then watched
    if (run.delegator === this.agentId) await this.store.noteOutgoing(run, false)
    return run
  }

  /**
   * A run this node delegated was handed off (by its executor's handler, or
   * at another authorized agent's request): the successor is asked for, and
   * recorded here as delegated by this node when it continues `pred` and
   * names this node its delegator, so liveness watches it and the listing
   * shows it. Undefined when a record of it is here already.
   */
  async adoptSuccessor (pred: Run, opts: CallOptions): Promise<Run | undefined> {
    const link = pred.handoff_to
    // a record of this node's delegation that names a successor on another node (the one judge, adoptions.ts)
    if (link === null || !this.store.adoptions.names(pred) || await this.store.getOutgoing(link.run_id) !== undefined) return undefined
    if (executorOfRun(link.run_id) !== link.agent_id) throw new InvalidRequestError('a handoff names a successor its named agent does not execute')
    const res = await this.controlClient.call(peerOf(link.agent_id), 'get_run', { run_id: link.run_id }, opts)
    const next = runFromAnswer(res, link.agent_id)
    if (next.run_id !== link.run_id) throw new InvalidRequestError('the executor answered with another run than the successor asked about')
    await this.noteSuccessor(next, pred.run_id)
    return next.delegator === this.agentId ? next : undefined
  }

  /**
   * The successor of a run handed off could not be asked about (its executor
   * unreachable, or gone for now): a record of it is kept from the link alone
   * (running, no events seen: last_seq 0, the predecessor's task and
   * capability), so liveness watches it like the run it continues, and the
   * first answer of its executor, or its events, replace it. Undefined when a
   * record of it is here already, or it is not this node's to watch.
   */
  async holdSuccessor (pred: Run): Promise<Run | undefined> {
    const link = pred.handoff_to
    if (link === null || !this.store.adoptions.names(pred) || executorOfRun(link.run_id) !== link.agent_id) return undefined
    if (await this.store.getOutgoing(link.run_id) !== undefined) return undefined
    const now = new Date().toISOString()
    const { context_id: _c, turn: _t, previous_turn: _p, ...base } = pred
    const held: Run = { ...base, ...FRESH_RUN, run_id: link.run_id, agent_id: link.agent_id, created_at: now, updated_at: now, handoff_from: { run_id: pred.run_id, agent_id: pred.agent_id } }
    await this.store.noteOutgoing(held)
    return held
  }

  /**
   * `next` must continue run `predId`; it is recorded here as delegated when
   * this node is its delegator and not its executor (a run handed back to
   * this node is one it executes, not one it watches).
   */
  private async noteSuccessor (next: Run, predId: string): Promise<void> {
    if (next.handoff_from?.run_id !== predId) throw new InvalidRequestError('a handoff\'s new run does not continue the run handed off')
    if (next.delegator === this.agentId && next.agent_id !== this.agentId) await this.store.noteOutgoing(next)
  }

  /**
   * Ask a run's delegator whether it declared the run's executor lost
   * (protocols/liveness.md): its signed verdict, or null.
   */
  async verdictFrom (delegator: string, runId: string, opts: CallOptions): Promise<AgentEvent | null> {
    return (await this.askDelegator(delegator, runId, opts)).verdict
  }

  /**
   * get_verdict at `agent` about a run this node executes: its verdict, and,
   * when its answer says, whether it holds a live record of the run as its
   * delegator (orphans.ts).
   */
  async askDelegator (agent: string, runId: string, opts: CallOptions): Promise<DelegatorAnswer> {
    const res = await this.controlClient.call(peerOf(agent), 'get_verdict', { run_id: runId }, opts)
    const { verdict } = isGetVerdictResponse.assert(res, 'get_verdict answer')
    const held = (res as { held?: unknown }).held
    const answer = typeof held === 'boolean' ? { held } : {}
    if (verdict === null) return { verdict: null, ...answer }
    const e = verifyEventSync(verdict, this.signatures)
    if (e.run_id !== runId || e.declared_by !== agent) throw new InvalidRequestError('the delegator answered with a verdict on another run or by another signer')
    return { verdict: e, ...answer }
  }
}
