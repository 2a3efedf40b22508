/**
 * How the answers of a discover's asks by key are verified (held-cards.ts
 * askHolder). A discover asks its first contacts by key at once with one
 * pick seed, and a holder's card is a result only once another source names
 * its agent (fetch-order.ts `backed`). Card checks are synchronous, so an
 * answer verified whole holds back the answer of the contact asked beside
 * it, whose first cards alone back its first ones. So an answer verifies as
 * many cards as the discover wants, then waits for the other asks' answers
 * (AskPace.othersAnswered; CARD_KEY_ANSWERS_WAIT_MS at most), and stops once
 * the discover's results are ready.
 */

/** What an ask by key is told while it verifies its answer. */
export interface AskPace {
  /** Results the discover still wants beyond those ready; at 0 or less the rest of an answer is not verified. */
  short: () => number
  /** This ask's answer is in (before any of it is verified). */
  answered: () => void
  /**
   * Resolves once no other ask by key of this discover waits for its answer: each has answered or ended (they
   * end on the discover's abort, or their own time limit, CARD_HELD_ASK_TIMEOUT_MS); at once when none waits.
   * When `stop` aborts first it resolves then, and the wait is forgotten at once (not when the others end).
   */
  othersAnswered: (stop?: AbortSignal) => Promise<void>
}

/** The asks by key of one discover whose answers have not come, and those that wait for them. */
export class KeyAnswers {
  private readonly unanswered = new Set<string>()
  /** At most one per ask by key of the discover (an ask waits once). */
  private waiters: Array<{ id: string, resolve: () => void }> = []

  /** An ask by key to `id` went out; its pace. */
  asked (id: string, short: () => number): AskPace {
    this.unanswered.add(id)
    return {
      short,
      answered: () => { this.answered(id) },
      othersAnswered: async (stop?: AbortSignal) => new Promise<void>(resolve => {
        if (stop?.aborted === true || !this.othersOut(id)) { resolve(); return }
        const waiter = { id, resolve: () => { stop?.removeEventListener('abort', leave); resolve() } }
        const leave = (): void => {
          this.waiters = this.waiters.filter(w => w !== waiter)
          resolve()
        }
        stop?.addEventListener('abort', leave, { once: true })
        this.waiters.push(waiter)
      })
    }
  }

  /** Waits not yet resolved (tests: none is left behind once each has ended). */
  get waiting (): number { return this.waiters.length }

  /** The ask by key to `id` answered or ended: those that wait for no other ask now go on. */
  answered (id: string): void {
    if (!this.unanswered.delete(id)) return
    const waiters = this.waiters
    this.waiters = []
    for (const w of waiters) {
      if (this.othersOut(w.id)) this.waiters.push(w)
      else w.resolve()
    }
  }

  private othersOut (id: string): boolean {
    for (const other of this.unanswered) if (other !== id) return true
    return false
  }
}
