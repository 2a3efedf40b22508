/**
 * Fetching a cached card again when it lacks what a caller wants of it (the
 * capability a discover looks for, or a delegation names): the agent may have
 * published a newer card since. One fetch per agent at a time, however many
 * callers want it: a caller that comes while it runs waits for it, rather
 * than taking the cached card and refusing the agent. The next may start
 * CARD_MISMATCH_REFRESH_MS after the last ended; within that the cached card
 * is the answer.
 */
import { CARD_CACHE_MAX_ENTRIES } from '../constants.ts'
import { makeRoom } from '../util/bounded.ts'
import { CARD_MISMATCH_REFRESH_MS } from './constants.ts'
import type { AgentCard } from './card.ts'
import type { CardSource } from './fetch-order.ts'

export interface Refreshed { card: AgentCard, source: CardSource }

export class CardRefreshes {
  /** When the last fetch ended, per agent (at most CARD_CACHE_MAX_ENTRIES, the oldest dropped). */
  private readonly endedAt = new Map<string, number>()
  /** Fetches under way, per agent. */
  private readonly running = new Map<string, Promise<Refreshed>>()

  /** A fetch of the agent's card runs, or may start now. */
  may (agentId: string): boolean {
    return this.running.has(agentId) || Date.now() - (this.endedAt.get(agentId) ?? -Infinity) >= CARD_MISMATCH_REFRESH_MS
  }

  /** The fetch of the agent's card under way, or `start` run as it (`started` told). The caller bounds `start` on its own, not on one caller's signal. */
  async run (agentId: string, start: () => Promise<Refreshed>, started: () => void): Promise<Refreshed> {
    let run = this.running.get(agentId)
    if (run === undefined) {
      started()
      run = start().finally(() => {
        this.running.delete(agentId)
        makeRoom(this.endedAt, CARD_CACHE_MAX_ENTRIES)
        this.endedAt.set(agentId, Date.now())
      })
      this.running.set(agentId, run)
    }
    return run
  }
}
