/**
 * The executor's run slots: running or blocked runs held at once, for the
 * node and for each agent that asked for them. A slot is taken before
 * anything of a new run is written and given back when the run ends (or is
 * never created). It is charged to the agent that asked: the delegator of a
 * delegated run, the sender of a handoff (an executor handing off one run
 * many times spends its own share, not its delegator's).
 */
import { DelegationRefusedError, InvalidRequestError } from '../errors.ts'
import { INBOUND_RUNS_SHARE_DIVISOR, MAX_INBOUND_RUNS_PER_DELEGATOR } from './constants.ts'

/**
 * One delegator's share of a node's `max` slots: the one set, at most `max`;
 * or, when none is set, `max` / INBOUND_RUNS_SHARE_DIVISOR rounded up, at
 * most MAX_INBOUND_RUNS_PER_DELEGATOR (64 of the default 256).
 */
export function delegatorShare (max: number, set?: number): number {
  if (set !== undefined) return Math.min(max, set)
  return Math.min(MAX_INBOUND_RUNS_PER_DELEGATOR, Math.ceil(max / INBOUND_RUNS_SHARE_DIVISOR))
}

export class RunSlots {
  private readonly max: number
  private readonly maxPerDelegator: number
  private readonly byDelegator = new Map<string, number>()
  /** Whom each run's slot is charged to. */
  private readonly holders = new Map<string, string>()
  private held = 0
  /** New runs refused for want of a slot: the node's, or the delegator's share. */
  readonly refused = { node: 0, delegator: 0 }

  /** `maxPerDelegator`: the share that was set, if one was (delegatorShare). */
  constructor (max: number, maxPerDelegator?: number) {
    this.max = max
    this.maxPerDelegator = delegatorShare(max, maxPerDelegator)
  }

  /** The most one delegator may hold. */
  get share (): number { return this.maxPerDelegator }

  /** Slots held now, in all and by one delegator. */
  get size (): number { return this.held }
  heldBy (delegator: string): number { return this.byDelegator.get(delegator) ?? 0 }

  /** Take a slot for run `runId` charged to `delegator`, or throw DELEGATION_REFUSED (`reason: capacity`). */
  take (delegator: string, runId: string): void {
    // a live run's id: the run exists already (and its slot is its own, never given back for this request)
    if (this.holders.has(runId)) throw new InvalidRequestError('the ticket names a run that exists already', { reason: 'run_id_taken' })
    if (this.held >= this.max) {
      this.refused.node++
      throw new DelegationRefusedError(`agent is at its limit of ${this.max} concurrent runs`, { reason: 'capacity', limit: this.max, scope: 'node' })
    }
    const mine = this.heldBy(delegator)
    if (mine >= this.maxPerDelegator) {
      this.refused.delegator++
      throw new DelegationRefusedError(`agent holds ${mine} concurrent runs of this delegator, its limit per delegator`, { reason: 'capacity', limit: this.maxPerDelegator, scope: 'delegator' })
    }
    this.charge(delegator, runId)
  }

  /** A run that was live before a restart holds its slot again (charged to its delegator), whatever the limits say now. */
  restore (delegator: string, runId: string): void {
    this.charge(delegator, runId)
  }

  /** Give back run `runId`'s slot, if it holds one. */
  release (runId: string): void {
    const holder = this.holders.get(runId)
    if (holder === undefined) return
    this.holders.delete(runId)
    this.held--
    const mine = this.heldBy(holder)
    if (mine <= 1) this.byDelegator.delete(holder)
    else this.byDelegator.set(holder, mine - 1)
  }

  private charge (delegator: string, runId: string): void {
    if (this.holders.has(runId)) return
    this.holders.set(runId, delegator)
    this.held++
    this.byDelegator.set(delegator, this.heldBy(delegator) + 1)
  }
}
