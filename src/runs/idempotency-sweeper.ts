/**
 * Deletes expired delegate idempotency records (RunStore.sweepIdempotency)
 * once at start and then every IDEMPOTENCY_SWEEP_INTERVAL_MS, one sweep at a
 * time; `stop` ends the sweep under way and waits for it.
 */
import type { Logger } from '../logger.ts'
import { IDEMPOTENCY_SWEEP_INTERVAL_MS } from './constants.ts'
import type { RunStore } from './store.ts'

export class IdempotencySweeper {
  private readonly store: RunStore
  private readonly log: Logger
  private readonly intervalMs: number
  private timer?: ReturnType<typeof setInterval>
  private running?: Promise<void>
  private readonly stopping = new AbortController()
  /** Records deleted, sweeps done, sweeps that failed (each logged). */
  readonly stats = { deleted: 0, sweeps: 0, failures: 0 }

  constructor (store: RunStore, log: Logger, intervalMs = IDEMPOTENCY_SWEEP_INTERVAL_MS) {
    this.store = store
    this.log = log
    this.intervalMs = intervalMs
  }

  start (): void {
    this.sweep()
    this.timer = setInterval(() => { this.sweep() }, this.intervalMs)
    this.timer.unref?.()
  }

  /** Start a sweep unless one is under way; resolves when the current one ends. */
  sweep (): Promise<void> {
    if (this.running !== undefined || this.stopping.signal.aborted) return this.running ?? Promise.resolve()
    this.running = this.store.sweepIdempotency(Date.now(), undefined, this.stopping.signal).then((n) => {
      this.stats.sweeps++
      this.stats.deleted += n
      if (n > 0) this.log.debug({ deleted: n }, 'expired idempotency records deleted')
    }, (err: unknown) => {
      this.stats.failures++
      this.log.warn({ err }, 'a sweep of expired idempotency records failed; the next one tries again')
    }).finally(() => { this.running = undefined })
    return this.running
  }

  async stop (): Promise<void> {
    this.stopping.abort()
    clearInterval(this.timer)
    await this.running
  }
}
