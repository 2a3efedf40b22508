/**
 * The sending side of a handoff. The run's executor signs the successor's
 * ticket from the run's own (what the successor inherits is the delegator's
 * word, not this node's), the receiver creates the successor, this node
 * commits the handoff event that names it, and then confirms the handoff to
 * the receiver with that event (phase two; see confirmations.ts for the
 * receiving side).
 */
import type { PrivateKey } from '@libp2p/interface'
import { capabilityString, supports, type AgentCard } from '../card/card.ts'
import { CapabilityNotSupportedError, DelegationRefusedError, InvalidRequestError, toAapError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { issueHandoffTicket, ticketOf } from '../runlog/ticket.ts'
import type { AgentEvent, Run } from '../runlog/types.ts'
import type { SignatureCache } from '../runlog/event.ts'
import type { CallOptions, RpcClient } from '../wire/rpc.ts'
import { runFromAnswer } from './caller.ts'
import { assertContextSize, type WireHandoff } from './messages.ts'
import { peerOf } from './peers.ts'
import { transition } from './state-machine.ts'
import type { RunStore } from './store.ts'
import { inSpan, parentOf } from './trace.ts'
import type { Actor, RunCommand } from './types.ts'

/** A handoff's call options, and the receiver's card when the one who asked for the handoff offered it. */
export type HandoffOptions = CallOptions & { card?: unknown }

/** What the sending side needs of the executor. */
export interface HandoffSide {
  agentId: string
  key: PrivateKey
  log: Logger
  /** The node's verified-signature cache (src/runlog/event.ts), shared with no other node. */
  signatures: SignatureCache
  store: RunStore
  client: RpcClient
  resolveCard: (agentId: string, opts?: { signal?: AbortSignal, offered?: unknown, wants?: (card: AgentCard) => boolean }) => Promise<AgentCard>
  /** Run `fn` holding the run's lock. */
  lock: <T>(runId: string, fn: () => Promise<T>) => Promise<T>
  localRun: (runId: string) => Promise<Run>
  /** Commit a transition of the run; the caller holds its lock. */
  commit: (runId: string, command: RunCommand, actor: Actor) => Promise<{ run: Run, event: AgentEvent }>
  /** INVALID_TRANSITION (handoff_unconfirmed) for a successor its sender has not confirmed yet (confirmations.ts). */
  refuseUnconfirmed: (runId: string, state: string) => void
}

/**
 * Hand a run this node executes to another agent, in two phases: the
 * receiver creates the successor from a ticket this node signs (inheriting
 * the run's own ticket), then, once this node has committed the handoff
 * event that names the successor, it is told so and starts it
 * (confirmations.ts). The run's lock is held from the check to the
 * transition, so two handoffs of one run never both reach a receiver.
 */
export async function sendHandoff (h: HandoffSide, runId: string, toAgent: string, context: Record<string, unknown>, actor: Actor, handoffOpts: HandoffOptions = {}): Promise<Run> {
  const { card: offered, ...opts } = handoffOpts
  // refused here, before anything is asked of the receiver (which checks it again)
  assertContextSize(context)
  // `callTimeoutMs` bounds the whole handoff (a control request's budget): the call to the receiver gets what is left
  const deadline = opts.callTimeoutMs === undefined ? undefined : Date.now() + opts.callTimeoutMs
  const within = (): CallOptions => {
    if (deadline === undefined) return opts
    const left = Math.max(deadline - Date.now(), 1)
    return { ...opts, callTimeoutMs: left, responseTimeoutMs: Math.min(opts.responseTimeoutMs ?? left, left) }
  }
  const { created, event } = await h.lock(runId, async () => {
    const old = await h.localRun(runId)
    // check first, so a terminal run or a stranger's request never reaches the receiver
    const dry = transition(old, { type: 'handoff', to: { run_id: `${toAgent}:pending`, agent_id: toAgent } }, actor, new Date().toISOString())
    if (!dry.ok) throw dry.error
    // a successor not confirmed yet is not the live run of its task line: handing it on would fork the line
    h.refuseUnconfirmed(runId, old.state)
    if (toAgent === h.agentId) throw new DelegationRefusedError('a run is not handed off to its own executor')
    const started = await h.store.log.get(runId, 1)
    const own = started === undefined ? undefined : ticketOf(started, undefined, h.signatures)
    if (started === undefined || own === undefined) throw new InvalidRequestError(`run ${runId} has no valid ticket, so it cannot be handed off`, { reason: 'no_ticket' })
    const ticket = await issueHandoffTicket(h.key, own, toAgent)
    // an offered card is verified, not fetched: a handoff to an agent the delegator just found costs no card fetch
    const card = await h.resolveCard(toAgent, { ...(opts.signal === undefined ? {} : { signal: opts.signal }), ...(offered === undefined ? {} : { offered }), wants: c => supports(c, old.capability) })
    if (!supports(card, old.capability)) {
      throw new CapabilityNotSupportedError(`agent ${toAgent} does not declare ${capabilityString(old.capability)}`, { capability: old.capability })
    }
    const body: WireHandoff = {
      to_agent: toAgent,
      from_run: { run_id: old.run_id, agent_id: old.agent_id },
      task_id: own.correlation_id,
      capability: own.capability,
      input: (started.payload.input ?? {}) as Record<string, unknown>,
      context,
      delegator: own.delegator,
      authorized: own.authorized,
      parent_run: own.parent_run,
      ticket,
      predecessor: started
    }
    const res = await inSpan('aap.handoff', 'client', await parentOf(undefined, h.store.log, runId), { 'aap.agent_id': h.agentId, 'aap.run_id': runId, 'aap.to_agent': toAgent },
      async (trace) => h.client.call(peerOf(toAgent), 'handoff', trace === undefined ? body : { ...body, trace }, within()))
    const made = runFromAnswer(res, toAgent)
    if (made.run_id !== ticket.run_id) throw new InvalidRequestError('the receiver created another run than the ticket names', { reason: 'ticket_mismatch' })
    // a caller that gave up (or a handler past its budget) commits nothing: the receiver's unconfirmed successor is dropped
    opts.signal?.throwIfAborted()
    const committed = await h.commit(runId, { type: 'handoff', to: { run_id: made.run_id, agent_id: toAgent } }, actor)
    return { created: made, event: committed.event }
  })
  // phase two, committed: it belongs to no caller any more, so it has its own limits, not the caller's signal (a
  // caller that gave up while the commit was under way would otherwise take the confirmation with it). Should it
  // be lost, the receiver asks for the run (get_run) before it gives up (confirmations.ts).
  h.client.call(peerOf(toAgent), 'confirm', { run_id: created.run_id, handoff_event: event }).catch((err: unknown) => {
    h.log.warn({ err: toAapError(err), run_id: runId, to: created.run_id }, 'the handoff confirmation did not arrive; the receiver will ask')
  })
  return created
}
