/**
 * What an executor checks before it creates a run for a request: the ticket
 * that proves the run's place (src/runlog/ticket.ts) must be the one the
 * request describes, issued by the authenticated peer that sent it. Authority
 * is never a payload claim: the delegator is the Noise peer and signs the
 * ticket; a sub-delegation comes from the executor of its parent run; a
 * handoff comes from the predecessor's executor and inherits what the
 * predecessor's own ticket says, not what the request claims.
 */
import { canonicalJson } from '../identity/signing.ts'
import { capabilityString, supports, type AgentCard, type CapabilityRef } from '../card/card.ts'
import { HANDLER_TIMEOUT_MS, MAX_HANDOFF_DEPTH, REASON_MAX_CHARS } from '../constants.ts'
import { CapabilityNotSupportedError, DelegationRefusedError, InvalidRequestError, TimeoutError, UnauthorizedError } from '../errors.ts'
import { untilAborted, withDeadline } from '../util/deadline.ts'
import { DELEGATION_POLICY_TIMEOUT_FACTOR } from './constants.ts'
import { executorOfRun, verifyEventSync, type SignatureCache } from '../runlog/event.ts'
import { originOf, ticketOf, ticketSignatures, verifyTicket, type RunTicket } from '../runlog/ticket.ts'
import type { Run } from '../runlog/types.ts'
import type { WireDelegate, WireHandoff } from './messages.ts'
import type { DelegationPolicy, RunHandler } from './types.ts'

/** A signal that never aborts (the policy's wait has its own limit). */
const NEVER = new AbortController().signal

function sameCapability (a: CapabilityRef, b: CapabilityRef): boolean {
  return capabilityString(a) === capabilityString(b)
}

function sameList (a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i])
}

/**
 * The verified ticket of a delegation from `from` to `self`; typed errors when it does not fit.
 * With `signatureChecked` the caller checks the signature itself (ticketSignatures) before it trusts the ticket.
 */
export function checkDelegation (req: WireDelegate, from: string, self: string, signatures?: SignatureCache, opts: { signatureChecked?: boolean } = {}): RunTicket {
  if (req.ticket === undefined) throw new UnauthorizedError('a delegation carries the delegator\'s signed ticket', { reason: 'no_ticket' })
  // the request's schema (method() checked it) covers the ticket's shape
  const t = verifyTicket(req.ticket, { shapeChecked: true, ...opts, ...(signatures === undefined ? {} : { signatures }) })
  if (t.issuer !== from || t.delegator !== from) {
    throw new UnauthorizedError('the ticket of a delegation is issued by the delegator that sends it', { reason: 'ticket_issuer' })
  }
  if (t.handoff_from !== null || t.executor !== self || t.correlation_id !== req.task_id || !sameCapability(t.capability, req.capability) ||
    t.parent_run !== req.parent_run || !sameList(t.authorized, req.authorized ?? [])) {
    throw new InvalidRequestError('the ticket does not describe this delegation', { reason: 'ticket_mismatch' })
  }
  // a sub-delegation comes from the agent that executes the parent run
  if (t.parent_run !== null && executorOfRun(t.parent_run) !== from) {
    throw new UnauthorizedError(`only the executor of run ${t.parent_run.slice(0, 160)} may delegate under it`, { reason: 'not_parent_executor' })
  }
  return t
}

/**
 * The delegation ticket's signature, checked on libuv's thread pool
 * (ticketSignatures) while the executor checks the rest of the request: a
 * delegation awaits it before it takes a slot or asks the policy
 * (protocols/delegate.md, checks 5, 7, 8). Resolves to INVALID_SIGNATURE's
 * error, or to undefined when it verifies (or there is no ticket, which
 * checkDelegation refuses). Never rejects, so it may wait unawaited; nothing
 * is stored before it resolves.
 */
export async function signatureVerdict (req: WireDelegate, signatures?: SignatureCache): Promise<unknown> {
  return req.ticket === undefined ? undefined : ticketSignatures(req.ticket, signatures).then(() => undefined, (err: unknown) => err)
}

/**
 * The verified ticket of a handoff from `from` to `self`: the predecessor's
 * run.started (signed by `from`, its executor) carries the ticket the
 * successor inherits from; the delegator, authorized agents and parent run
 * the request claims must be exactly those. DELEGATION_REFUSED past
 * MAX_HANDOFF_DEPTH.
 */
export function checkHandoff (req: WireHandoff, from: string, self: string, signatures?: SignatureCache): RunTicket {
  if (from !== executorOfRun(req.from_run.run_id) || req.from_run.agent_id !== from) {
    throw new UnauthorizedError('a handoff must come from the executor of the run it transfers', { reason: 'not_executor' })
  }
  if (req.ticket === undefined || req.predecessor === undefined) {
    throw new UnauthorizedError('a handoff carries the successor\'s ticket and the predecessor\'s run.started', { reason: 'no_ticket' })
  }
  const started = verifyEventSync(req.predecessor, signatures)
  const pt = ticketOf(started, undefined, signatures)
  if (started.type !== 'run.started' || started.run_id !== req.from_run.run_id || pt === undefined) {
    throw new InvalidRequestError('a handoff carries the run.started of the run it transfers, with its ticket', { reason: 'bad_predecessor' })
  }
  if (req.delegator !== pt.delegator || !sameList(req.authorized, pt.authorized) || req.parent_run !== pt.parent_run ||
    req.task_id !== pt.correlation_id || !sameCapability(req.capability, pt.capability)) {
    throw new UnauthorizedError('a handoff names a delegator, authorized agents or a parent run that are not the run\'s own', { reason: 'false_inheritance' })
  }
  // the successor goes on with the work the delegator asked for: the input its predecessor's run.started signed
  if (canonicalJson(req.input) !== canonicalJson(started.payload.input ?? {})) {
    throw new UnauthorizedError('a handoff carries another input than the run it transfers was started with', { reason: 'false_inheritance' })
  }
  if (pt.depth + 1 > MAX_HANDOFF_DEPTH) {
    throw new DelegationRefusedError(`run ${pt.run_id} has been handed off ${pt.depth} times; at most ${MAX_HANDOFF_DEPTH}`, { reason: 'handoff_depth', max: MAX_HANDOFF_DEPTH })
  }
  const t = verifyTicket(req.ticket, { shapeChecked: true, ...(signatures === undefined ? {} : { signatures }) })
  if (t.issuer !== from || t.executor !== self || t.handoff_from?.run_id !== pt.run_id || t.depth !== pt.depth + 1 ||
    originOf(t).signature !== originOf(pt).signature || t.delegator !== pt.delegator || !sameList(t.authorized, pt.authorized) ||
    t.parent_run !== pt.parent_run || (pt.depth === 0 ? t.chain !== undefined : t.chain?.at(-1)?.signature !== pt.signature)) {
    throw new UnauthorizedError('the handoff ticket does not continue the transferred run\'s own ticket', { reason: 'false_inheritance' })
  }
  return t
}

/** What a run that just started holds besides who and what it is: no link onward, no checkpoint, no end, no events seen. */
export const FRESH_RUN = { state: 'running', handoff_to: null, checkpoint_id: null, block_reason: null, output: null, failure: null, last_seq: 0 } as const

/** The new running run an admitted ticket describes, before its run.started is committed. */
export function runOfTicket (t: RunTicket, turn?: { context_id: string, turn: number, previous_turn: string | null }): Run {
  const now = new Date().toISOString()
  return {
    ...(turn === undefined ? {} : { context_id: turn.context_id, turn: turn.turn, previous_turn: turn.previous_turn }),
    run_id: t.run_id,
    agent_id: t.executor,
    correlation_id: t.correlation_id,
    created_at: now,
    updated_at: now,
    capability: t.capability,
    delegator: t.delegator,
    authorized: t.authorized,
    parent_run: t.parent_run,
    handoff_from: t.handoff_from,
    ...FRESH_RUN
  }
}

/** CAPABILITY_NOT_SUPPORTED unless this node's card declares the capability and a handler serves it. */
export function assertServes (card: AgentCard | undefined, handlers: Map<string, RunHandler>, capability: CapabilityRef, self: string): void {
  if (card === undefined || !supports(card, capability) || !handlers.has(capabilityString(capability))) {
    throw new CapabilityNotSupportedError(`agent ${self} does not serve ${capabilityString(capability)}`, { capability })
  }
}

/**
 * DELEGATION_REFUSED (reason policy) when the node's delegation policy
 * refuses the request. A policy may still answer after its request ended
 * (its caller went, or it overran its time: the run is then created, and
 * fails with HANDLE_UNDELIVERED); one that has not answered within
 * `handlerTimeoutMs` × DELEGATION_POLICY_TIMEOUT_FACTOR is given up (TIMEOUT,
 * reason policy_timeout), whether or not it heeds its signal, so it keeps
 * neither the request's slot nor its idempotency key for good.
 */
export async function askPolicy (policy: DelegationPolicy | undefined, req: Parameters<DelegationPolicy>[0], handlerTimeoutMs = HANDLER_TIMEOUT_MS): Promise<void> {
  if (policy === undefined) return
  const limitMs = handlerTimeoutMs * DELEGATION_POLICY_TIMEOUT_FACTOR
  const limit = withDeadline(NEVER, limitMs)
  let refusal: string | undefined
  try {
    refusal = await untilAborted(Promise.resolve(policy(req)), limit.signal)
  } catch (err) {
    if (!limit.signal.aborted) throw err
    throw new TimeoutError(`the delegation policy did not answer within ${limitMs} ms`, { reason: 'policy_timeout', limit_ms: limitMs }, { cause: err })
  } finally {
    limit.clear()
  }
  if (refusal !== undefined) throw new DelegationRefusedError(refusal.slice(0, REASON_MAX_CHARS), { reason: 'policy' })
}
