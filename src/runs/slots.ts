/**
 * The executor's run slots: running or blocked runs held at once, for the
 * node and for each delegator. A slot is taken before anything of a new run
 * is written and given back when the run ends (or is never created).
 */
import { DelegationRefusedError } from '../errors.ts'

export class RunSlots {
  private readonly max: number
  private readonly maxPerDelegator: number
  private readonly byDelegator = new Map<string, number>()
  private held = 0
  /** New runs refused for want of a slot: the node's, or the delegator's share. */
  readonly refused = { node: 0, delegator: 0 }

  constructor (max: number, maxPerDelegator: number) {
    this.max = max
    this.maxPerDelegator = Math.min(max, maxPerDelegator)
  }

  /** Slots held now, in all and by one delegator. */
  get size (): number { return this.held }
  heldBy (delegator: string): number { return this.byDelegator.get(delegator) ?? 0 }

  /** Take a slot for a run of `delegator`, or throw DELEGATION_REFUSED (`reason: capacity`). */
  take (delegator: string): void {
    if (this.held >= this.max) {
      this.refused.node++
      throw new DelegationRefusedError(`agent is at its limit of ${this.max} concurrent runs`, { reason: 'capacity', limit: this.max, scope: 'node' })
    }
    const mine = this.heldBy(delegator)
    if (mine >= this.maxPerDelegator) {
      this.refused.delegator++
      throw new DelegationRefusedError(`agent holds ${mine} concurrent runs of this delegator, its limit per delegator`, { reason: 'capacity', limit: this.maxPerDelegator, scope: 'delegator' })
    }
    this.held++
    this.byDelegator.set(delegator, mine + 1)
  }

  /** A run that was live before a restart holds its slot again, whatever the limits say now. */
  restore (delegator: string): void {
    this.held++
    this.byDelegator.set(delegator, this.heldBy(delegator) + 1)
  }

  release (delegator: string): void {
    const mine = this.heldBy(delegator)
    if (mine <= 0) return
    this.held--
    if (mine === 1) this.byDelegator.delete(delegator)
    else this.byDelegator.set(delegator, mine - 1)
  }
}
