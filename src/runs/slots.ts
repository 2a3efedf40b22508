/**
 * The executor's run slots: running or blocked runs held at once, for the
 * node and for each agent that asked for them. A slot is taken before
 * anything of a new run is written and given back when the run ends (or is
 * never created). It is charged to the agent that asked: the delegator of a
 * delegated run, the sender of a handoff (an executor handing off one run
 * many times spends its own share, not its delegator's).
 *
 * A run that ends while its handler's function has not returned (a handler
 * that does not heed its signal) gives its delegator's share back at once,
 * but holds its node slot until the handler returns: the node's limit bounds
 * the handlers alive, not only the live runs.
 *
 * The share is per key: it is charged to the Noise peer id that asked, and
 * any fresh key is a new delegator with a share of its own. The delegation
 * policy (an allow-list) is what keeps many identities from filling the node.
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
  /** Ended runs whose handler has not returned: each still holds a node slot (none of a share). */
  private readonly outliving = new Set<string>()
  /** New runs refused for want of a slot: the node's, or the delegator's share. */
  readonly refused = { node: 0, delegator: 0 }
  /** Handlers still running when another party ended their run (a cancel, a verdict), since start. */
  outlived = 0

  /** `maxPerDelegator`: the share that was set, if one was (delegatorShare). */
  constructor (max: number, maxPerDelegator?: number) {
    this.max = max
    this.maxPerDelegator = delegatorShare(max, maxPerDelegator)
  }

  /** The most one delegator may hold. */
  get share (): number { return this.maxPerDelegator }

  /** Slots held now, in all (those of handlers that outlive their run included) and by one delegator. */
  get size (): number { return this.held }
  /** Node slots held now by handlers whose run ended. */
  get outlivingNow (): number { return this.outliving.size }
  heldBy (delegator: string): number { return this.byDelegator.get(delegator) ?? 0 }

  /** Take a slot for run `runId` charged to `delegator`, or throw DELEGATION_REFUSED (`reason: capacity`). */
  take (delegator: string, runId: string): void {
    // a live run's id: the run exists already (and its slot is its own, never given back for this request)
    if (this.holders.has(runId) || this.outliving.has(runId)) throw new InvalidRequestError('the ticket names a run that exists already', { reason: 'run_id_taken' })
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
    if (this.unshare(runId)) this.held--
  }

  /**
   * Run `runId` ended. With `handlerLive` (its handler has not returned) only
   * its delegator's share is given back, and its node slot is held until
   * handlerReturned; `stopped`: another party ended it (counted in `outlived`).
   */
  end (runId: string, handlerLive: boolean, stopped: boolean): void {
    if (!handlerLive) {
      this.release(runId)
      return
    }
    if (!this.unshare(runId)) return
    this.outliving.add(runId)
    if (stopped) this.outlived++
  }

  /** Run `runId`'s handler returned: true if its run had ended, and the node slot it still held is given back now. */
  handlerReturned (runId: string): boolean {
    if (!this.outliving.delete(runId)) return false
    this.held--
    return true
  }

  /** Take run `runId` off its delegator's share (its node slot is left held); false if it held none. */
  private unshare (runId: string): boolean {
    const holder = this.holders.get(runId)
    if (holder === undefined) return false
    this.holders.delete(runId)
    const mine = this.heldBy(holder)
    if (mine <= 1) this.byDelegator.delete(holder)
    else this.byDelegator.set(holder, mine - 1)
    return true
  }

  private charge (delegator: string, runId: string): void {
    if (this.holders.has(runId)) return
    this.holders.set(runId, delegator)
    this.held++
    this.byDelegator.set(delegator, this.heldBy(delegator) + 1)
  }
}
