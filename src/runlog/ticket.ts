/**
 * Delegation tickets: the signed word of whoever may put a run into a
 * correlation. A run's `run.started` carries its ticket, so any holder of the
 * log can check the run's place in its correlation without trusting the
 * executor (protocols/lineage.md):
 *
 * - a delegated run's ticket is signed by its delegator (the issuer);
 * - a handoff successor's ticket is signed by the predecessor's executor and
 *   carries `origin`, the delegation ticket the chain began with, so the
 *   delegator, the authorized agents and the parent run it inherits are the
 *   delegator's own word, not the sender's.
 *
 * The issuer chooses the run id (`<executor>:<random>`), so one ticket admits
 * exactly one run.
 */
import type { PrivateKey } from '@libp2p/interface'
import type { CapabilityRef } from '../card/card.ts'
import { createHash } from 'node:crypto'
import { MAX_HANDOFF_DEPTH, TICKETS_ISSUED_REMEMBERED, TICKET_SIGNING_DOMAIN } from '../constants.ts'
import { DelegationRefusedError, InvalidRequestError, InvalidSignatureError, UnauthorizedError } from '../errors.ts'
import { agentIdOf } from '../identity/identity.ts'
import { signRaw, signingBytes } from '../identity/signing.ts'
import { toString } from 'uint8arrays'
import { schema } from '../schema/validate.ts'
import { executorOfRun, newRunId, processSignatures, verifySignedBytes, type SignatureCache } from './event.ts'
import type { AgentEvent, HandoffLink } from './types.ts'

export interface OriginTicket {
  run_id: string
  executor: string
  correlation_id: string
  capability: CapabilityRef
  parent_run: string | null
  handoff_from: null
  delegator: string
  authorized: string[]
  depth: 0
  issuer: string
  issued_at: string
  signature: string
}

export interface RunTicket extends Omit<OriginTicket, 'handoff_from' | 'depth'> {
  handoff_from: HandoffLink | null
  depth: number
  /** Set on handoff successors: the delegation ticket the chain began with. */
  origin?: OriginTicket
  /**
   * Set on handoff successors past the first (depth 2 and more): the tickets
   * of the runs between the origin's and the predecessor, from depth 1 on,
   * without what each shares with the origin. With them any holder proves
   * every hop of the chain from the ticket alone (`verifyTicket`).
   */
  chain?: TicketLink[]
}

/**
 * A ticket of a handoff chain as the tickets after it carry it: only what no
 * other member of the chain implies. The rest is implied: its executor is
 * the one its run id names; it continues the run before it in the chain (the
 * origin's, for the first), so its `handoff_from` and its issuer are that
 * run and that run's executor; its depth is its place; and what it inherits
 * is the origin's.
 */
export interface TicketLink {
  run_id: string
  issued_at: string
  signature: string
}

/** What the ticket a link stands for signed: the link made whole again from the origin and the links before it. */
function linkUnsigned (l: TicketLink, origin: OriginTicket, before: TicketLink[]): { issuer: string, unsigned: object } {
  const prev = before.at(-1)?.run_id ?? origin.run_id
  const issuer = executorOfRun(prev)
  const unsigned = {
    run_id: l.run_id,
    executor: executorOfRun(l.run_id),
    correlation_id: origin.correlation_id,
    capability: origin.capability,
    parent_run: origin.parent_run,
    handoff_from: { run_id: prev, agent_id: issuer },
    delegator: origin.delegator,
    authorized: origin.authorized,
    depth: before.length + 1,
    issuer,
    issued_at: l.issued_at,
    origin,
    ...(before.length === 0 ? {} : { chain: before })
  }
  return { issuer, unsigned }
}

export const isRunTicket = schema<RunTicket>('aap:runs#/definitions/RunTicket')

function sameCapability (a: CapabilityRef, b: CapabilityRef): boolean {
  return a.capability_id === b.capability_id && a.version === b.version
}

function sameList (a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i])
}

/** The ticket of a delegation, signed by the delegator (`key`), for a new run of `executor`. */
export async function issueDelegationTicket (key: PrivateKey, d: {
  executor: string
  correlation_id: string
  capability: CapabilityRef
  parent_run: string | null
  authorized: string[]
}): Promise<RunTicket> {
  const issuer = agentIdOf(key)
  const unsigned = {
    run_id: newRunId(d.executor),
    executor: d.executor,
    correlation_id: d.correlation_id,
    capability: d.capability,
    parent_run: d.parent_run,
    handoff_from: null,
    delegator: issuer,
    authorized: d.authorized,
    depth: 0,
    issuer,
    issued_at: new Date().toISOString()
  }
  return { ...unsigned, signature: await signTicket(key, issuer, unsigned) }
}

/**
 * Tickets this process signed, by `<issuer> <signature>`: the SHA-256 of the
 * bytes signed (bounded, oldest forgotten first). A node that judges a ticket
 * it issued itself (a delegator placing its run's run.started) compares the
 * bytes instead of verifying its own signature again. Only the issuer's own
 * node may use its entries (`verifyTicket`'s `self`), so nodes that share a
 * process do not vouch for each other.
 */
const issued = new Map<string, string>()

const digest = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('base64')

async function signTicket (key: PrivateKey, issuer: string, unsigned: object): Promise<string> {
  const bytes = signingBytes(TICKET_SIGNING_DOMAIN, unsigned)
  const signature = toString(await signRaw(key, bytes), 'base64url')
  if (issued.size >= TICKETS_ISSUED_REMEMBERED) {
    const oldest = issued.keys().next()
    if (oldest.done !== true) issued.delete(oldest.value)
  }
  issued.set(`${issuer} ${signature}`, digest(bytes))
  return signature
}

/**
 * The ticket of a handoff successor, signed by the predecessor's executor
 * (`key`): everything the successor inherits comes from the predecessor's
 * ticket. DELEGATION_REFUSED past MAX_HANDOFF_DEPTH.
 */
export async function issueHandoffTicket (key: PrivateKey, predecessor: RunTicket, to: string): Promise<RunTicket> {
  const issuer = agentIdOf(key)
  const depth = predecessor.depth + 1
  if (depth > MAX_HANDOFF_DEPTH) {
    throw new DelegationRefusedError(`run ${predecessor.run_id} has been handed off ${predecessor.depth} times; at most ${MAX_HANDOFF_DEPTH}`, { reason: 'handoff_depth', max: MAX_HANDOFF_DEPTH })
  }
  // the predecessor's own place in the chain travels on, so the successor proves every hop back to the origin
  const p = predecessor
  const chain = p.handoff_from === null ? undefined : [...(p.chain ?? []), { run_id: p.run_id, issued_at: p.issued_at, signature: p.signature }]
  const unsigned = {
    run_id: newRunId(to),
    executor: to,
    correlation_id: predecessor.correlation_id,
    capability: predecessor.capability,
    parent_run: predecessor.parent_run,
    handoff_from: { run_id: predecessor.run_id, agent_id: predecessor.executor },
    delegator: predecessor.delegator,
    authorized: predecessor.authorized,
    depth,
    issuer,
    issued_at: new Date().toISOString(),
    origin: originOf(predecessor),
    ...(chain === undefined ? {} : { chain })
  }
  return { ...unsigned, signature: await signTicket(key, issuer, unsigned) }
}

/** The delegation ticket a ticket's chain began with (itself for a delegation). */
export function originOf (t: RunTicket): OriginTicket {
  if (t.origin !== undefined) return t.origin
  const { origin: _ignored, chain: _chain, ...rest } = t
  return { ...rest, handoff_from: null, depth: 0 }
}

function checkSignature (t: { issuer: string, signature: string }, unsigned: object, what: string, self: string | undefined, signatures: SignatureCache | undefined): void {
  const bytes = signingBytes(TICKET_SIGNING_DOMAIN, unsigned)
  // a ticket this very node signed: the same bytes are its own signature, no need to verify it
  if (self !== undefined && t.issuer === self && issued.get(`${self} ${t.signature}`) === digest(bytes)) return
  if (!verifySignedBytes(t.issuer, bytes, t.signature, signatures)) throw badSignature(what)
}

const badSignature = (what: string): InvalidSignatureError => new InvalidSignatureError(`${what} is not signed by its issuer`, { reason: 'bad_ticket_signature' })

/**
 * The signatures of a ticket (and of its origin, for a handoff's), checked
 * on libuv's thread pool while the caller goes on: resolves when they verify,
 * rejects with INVALID_SIGNATURE otherwise. For a caller that then checks the
 * rest with `verifyTicket(..., { signatureChecked: true })` and trusts the
 * ticket only once this has resolved.
 */
export async function ticketSignatures (t: RunTicket, signatures: SignatureCache = processSignatures): Promise<void> {
  const { signature, ...unsigned } = t
  const checks = [signatures.verifyAsync(t.issuer, signingBytes(TICKET_SIGNING_DOMAIN, unsigned), signature)]
  if (t.origin !== undefined) {
    const { signature: originSignature, ...originUnsigned } = t.origin
    checks.push(signatures.verifyAsync(t.origin.issuer, signingBytes(TICKET_SIGNING_DOMAIN, originUnsigned), originSignature))
  }
  const links = t.chain ?? []
  if (t.origin !== undefined) {
    for (let k = 0; k < links.length; k++) {
      const l = links[k] as TicketLink
      const { issuer, unsigned: linkBytes } = linkUnsigned(l, t.origin, links.slice(0, k))
      checks.push(signatures.verifyAsync(issuer, signingBytes(TICKET_SIGNING_DOMAIN, linkBytes), l.signature))
    }
  }
  const [own, origin, ...chain] = await Promise.all(checks)
  if (own !== true) throw badSignature('the ticket')
  if (origin === false) throw badSignature('the origin ticket')
  if (chain.some(ok => ok !== true)) throw badSignature('a ticket of the chain')
}

/**
 * A ticket's shape, signatures and internal consistency. Throws
 * INVALID_REQUEST (shape, inconsistent fields) or INVALID_SIGNATURE. What it
 * does not check is the ticket's place in a correlation (lineage.ts) and who
 * sent it (the executor checks that against the authenticated peer).
 * `signatures` is the node's own signature cache (the process's when none).
 */
export function verifyTicket (value: unknown, opts: { shapeChecked?: boolean, signatureChecked?: boolean, self?: string, signatures?: SignatureCache } = {}): RunTicket {
  // a caller whose request schema already covered the ticket need not check its shape twice
  const t = opts.shapeChecked === true ? value as RunTicket : isRunTicket.assert(value, 'ticket')
  const { signature, ...unsigned } = t
  // a caller that checks the signatures itself (ticketSignatures) does not trust the ticket before they verify
  const sigs = opts.signatureChecked !== true
  if (sigs) checkSignature({ issuer: t.issuer, signature }, unsigned, 'the ticket', opts.self, opts.signatures)
  if (executorOfRun(t.run_id) !== t.executor) throw new InvalidRequestError('the ticket names a run of another executor', { reason: 'bad_ticket' })
  if (t.handoff_from === null) {
    // a delegation: the delegator itself issues it, with nothing inherited
    if (t.issuer !== t.delegator || t.depth !== 0 || t.origin !== undefined || t.chain !== undefined) {
      throw new InvalidRequestError('a delegation ticket is issued by its delegator at depth 0', { reason: 'bad_ticket' })
    }
    return t
  }
  // a handoff successor: issued by the predecessor's executor, inheriting from the origin
  const o = t.origin
  if (o === undefined || t.depth < 1 || t.depth > MAX_HANDOFF_DEPTH) {
    throw new InvalidRequestError('a handoff ticket carries its origin and a depth from 1 to MAX_HANDOFF_DEPTH', { reason: 'bad_ticket' })
  }
  if (t.issuer !== t.handoff_from.agent_id || executorOfRun(t.handoff_from.run_id) !== t.issuer) {
    throw new InvalidRequestError('a handoff ticket is issued by the executor of the run handed off', { reason: 'bad_ticket' })
  }
  const { signature: originSignature, ...originUnsigned } = o
  if (sigs) checkSignature({ issuer: o.issuer, signature: originSignature }, originUnsigned, 'the origin ticket', opts.self, opts.signatures)
  if (o.issuer !== o.delegator || executorOfRun(o.run_id) !== o.executor) {
    throw new InvalidRequestError('the origin ticket is not a delegation ticket', { reason: 'bad_ticket' })
  }
  if (o.correlation_id !== t.correlation_id || !sameCapability(o.capability, t.capability) || o.parent_run !== t.parent_run ||
    o.delegator !== t.delegator || !sameList(o.authorized, t.authorized)) {
    throw new UnauthorizedError('a handoff ticket must inherit delegator, authorized agents, parent run and capability from its origin', { reason: 'false_inheritance' })
  }
  // every hop back to the origin: the first handoff transfers the origin's own run (so its issuer is the executor
  // the delegator chose), each later one the run the hop before created, issued by that run's executor
  const links = t.chain ?? []
  if (links.length !== t.depth - 1) {
    throw new UnauthorizedError('a handoff ticket carries the tickets of the chain before it, back to its origin', { reason: 'false_inheritance' })
  }
  for (let k = 0; k < links.length; k++) {
    const l = links[k] as TicketLink
    // each link signed by the executor of the run before it (a link's own place is implied, so this is all it proves)
    const { issuer, unsigned: linkBytes } = linkUnsigned(l, o, links.slice(0, k))
    if (sigs) checkSignature({ issuer, signature: l.signature }, linkBytes, 'a ticket of the chain', opts.self, opts.signatures)
  }
  const last = links.at(-1)?.run_id ?? o.run_id
  if (t.handoff_from.run_id !== last || t.issuer !== executorOfRun(last)) {
    throw new UnauthorizedError('a handoff ticket continues the run its chain ends with', { reason: 'false_inheritance' })
  }
  return t
}

/**
 * Tickets already judged, by the run.started event object that carries them:
 * the same event object passes through the executor's commit, its publish
 * and the lineage judge, and each would otherwise check the signature again.
 */
const judged = new WeakMap<AgentEvent, RunTicket | null>()

/**
 * The ticket in a run.started event (verified), or undefined when it has none
 * or a bad one. `self`: the agent of the node that asks (a ticket it issued
 * itself is checked against what it signed, see `issued`); `signatures`: its
 * signature cache.
 */
export function ticketOf (started: AgentEvent, self?: string, signatures?: SignatureCache): RunTicket | undefined {
  if (started.type !== 'run.started') return undefined
  const known = judged.get(started)
  if (known !== undefined) return known ?? undefined
  let t: RunTicket | undefined
  try {
    t = verifyTicket(started.payload.ticket, { ...(self === undefined ? {} : { self }), ...(signatures === undefined ? {} : { signatures }) })
    if (t.run_id !== started.run_id || t.correlation_id !== started.correlation_id || t.executor !== started.executor || !describesTicket(started.payload, t)) t = undefined
  } catch {
    t = undefined // the lineage judge counts it as a run without a valid ticket
  }
  judged.set(started, t ?? null)
  return t
}

/**
 * Whether a run.started payload says of its run what its ticket proves: the
 * delegator, capability and parent run, and for a handoff successor the run
 * it continues and who handed it over (the ticket's issuer); a run the ticket
 * delegates names no predecessor. Only the executor signed the payload, and
 * the replay and the correlation's bookkeeping read these fields from it, so
 * a payload that claims another place than its ticket leaves the run without
 * a valid ticket. Honest executors write the ticket's own values.
 */
function describesTicket (p: Record<string, unknown>, t: RunTicket): boolean {
  const cap = p.capability as Record<string, unknown> | null | undefined
  if (p.delegator !== t.delegator || (p.parent_run ?? null) !== t.parent_run || typeof cap !== 'object' || cap === null ||
    cap.capability_id !== t.capability.capability_id || cap.version !== t.capability.version) return false
  const from = p.handoff_from as Record<string, unknown> | null | undefined
  if (t.handoff_from === null) return (from ?? null) === null && p.handoff_by === undefined
  return typeof from === 'object' && from !== null && from.run_id === t.handoff_from.run_id && from.agent_id === t.handoff_from.agent_id && p.handoff_by === t.issuer
}

/** Record that `started` carries `ticket`, verified already (the executor that created the run checked it). */
export function rememberTicket (started: AgentEvent, ticket: RunTicket): void {
  judged.set(started, ticket)
}
