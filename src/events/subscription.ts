/**
 * One consumer of a correlation's events: an async iterable (or a callback)
 * that only ever sees verified events, each run's in seq order, each event
 * once. The events service feeds it; closing it is the consumer's way out.
 */
import { SUBSCRIBER_BUFFER_MAX_EVENTS } from '../constants.ts'
import { AapError, toAapError } from '../errors.ts'
import type { AgentEvent } from '../runlog/types.ts'

export interface SubscribeOptions {
  /**
   * The agent whose task the correlation is (its root delegator): only runs
   * admitted to its task are delivered (protocols/lineage.md). Without it the
   * node's own runs name the owner, or else the first root run admitted.
   */
  owner?: string
  /** Agents known to take part (delegator, executors, ...): dialed and synced from first. */
  participants?: string[]
  /** Run ids of the correlation the caller already holds handles for. */
  runs?: string[]
  /** Start with every event the node holds or can sync (default), or only with new ones. */
  history?: boolean
  /** Push style: called with each event instead of buffering it for the iterator. */
  onEvent?: (event: AgentEvent) => void
  /** Closes the subscription when aborted. */
  signal?: AbortSignal
  /** Events buffered for a slow iterator before the subscription fails (default SUBSCRIBER_BUFFER_MAX_EVENTS). */
  maxBuffered?: number
}

/** A consumer that fell more than its buffer behind: it re-subscribes (history comes from the log). */
export class SubscriberOverflowError extends AapError {
  constructor (correlationId: string, max: number) {
    super('INTERNAL', `subscriber of ${correlationId} fell more than ${max} events behind`, { reason: 'overflow', max_buffered: max })
    this.name = 'SubscriberOverflowError'
  }
}

/**
 * Where a subscription that is behind the log reads the rest of its history
 * (catch-up.ts). One `pull` calls `settleSupersedes`, then queues at most
 * a page of events through `acceptHistory`, or calls `goLive` once nothing
 * is left to read.
 */
export interface HistorySource {
  pull: (sub: EventSubscription) => Promise<void>
}

export class EventSubscription implements AsyncIterableIterator<AgentEvent> {
  readonly correlation_id: string
  private readonly queue: AgentEvent[] = []
  private readonly cursor = new Map<string, number>()
  private readonly onEvent?: (event: AgentEvent) => void
  readonly maxBuffered: number
  private readonly onClose: (sub: EventSubscription) => void
  /** Calls of `next` waiting for an event, oldest first (a consumer may call it again before one settles). */
  private readonly waiters: Array<PromiseWithResolvers<IteratorResult<AgentEvent>>> = []
  /** Settled when the subscription ends: a `next` waiting on a pull returns then, not when the pull gets its turn. */
  private readonly ended = Promise.withResolvers<void>()
  private failure?: AapError
  private done = false
  /** The caller's signal and this subscription's listener on it, removed when the subscription ends. */
  private readonly signal?: AbortSignal
  private readonly onAbort = (): void => { this.close() }
  /** While set, the subscription reads its history from here and ignores live events (the log holds them). */
  private history?: HistorySource
  private pulling?: Promise<void>
  /** Executors' events that replaced a verdict while catching up, by run: settled on the next pull. */
  private superseding?: AgentEvent[]
  /** Events of the history still buffered when the subscription went live: the ones behind them are live. */
  private historyBuffered = 0
  /** Calls of the `onEvent` callback that threw (delivery went on), and the last such error. */
  callbackErrors = 0
  lastCallbackError: unknown

  constructor (correlationId: string, opts: SubscribeOptions, onClose: (sub: EventSubscription) => void) {
    this.correlation_id = correlationId
    if (opts.onEvent !== undefined) this.onEvent = opts.onEvent
    this.maxBuffered = opts.maxBuffered ?? SUBSCRIBER_BUFFER_MAX_EVENTS
    this.onClose = onClose
    if (opts.signal !== undefined) {
      if (opts.signal.aborted) this.done = true
      else {
        // a signal may outlive many subscriptions (a handler's own, say): the listener goes when this one ends
        this.signal = opts.signal
        opts.signal.addEventListener('abort', this.onAbort, { once: true })
      }
    }
  }

  get closed (): boolean {
    return this.done
  }

  /** Last seq handed out per run. */
  position (runId: string): number {
    return this.cursor.get(runId) ?? 0
  }

  /** Skip everything up to `seq` of a run (a subscription that asked for no history). */
  startAfter (runId: string, seq: number): void {
    if (seq > this.position(runId)) this.cursor.set(runId, seq)
  }

  /**
   * Called by the service with verified events, each run's in order. Events
   * at or below the cursor are repeats (history and live overlap) and dropped.
   */
  deliver (event: AgentEvent): void {
    if (this.history !== undefined) return
    this.accept(event, true)
  }

  /**
   * Read the history from `source` at the consumer's pace (an iterator
   * subscription): live events are ignored until `goLive`, since the log
   * holds them and the catch-up reads them there in order.
   */
  readFrom (source: HistorySource): void {
    if (!this.done && this.onEvent === undefined) this.history = source
  }

  get catchingUp (): boolean {
    return this.history !== undefined
  }

  /** An event read from the log by the catch-up: never more than a page per pull, so never an overflow. */
  acceptHistory (event: AgentEvent): void {
    this.accept(event, false)
  }

  /**
   * Called by the catch-up, in the correlation's locked step, before it reads:
   * an executor's event that replaced a verdict this subscription already
   * handed out (its position is that seq) is handed out now; one at a seq not
   * reached yet is read from the log in its turn, since the log holds it now
   * (the copies are written before this step). Past that seq, what was read
   * there was read after the replacement was stored. In the order they came.
   */
  settleSupersedes (): void {
    const pending = this.superseding
    if (pending === undefined) return
    this.superseding = undefined
    for (const e of pending) {
      if (this.position(e.run_id) !== e.seq) continue
      this.cursor.set(e.run_id, e.seq - 1)
      this.accept(e, false)
    }
  }

  /** Caught up, in the correlation's locked step: from now on live events are delivered. */
  goLive (): void {
    this.settleSupersedes()
    this.history = undefined
    this.historyBuffered = this.queue.length
  }

  /**
   * Whether every event of the history has been handed out, so what `next`
   * gives from now on is live. Reads the next page when the buffer is empty
   * and history remains, and never waits for a live event: a consumer that
   * marks where the history ends (the API's `ready`) asks before each `next`.
   */
  async pastHistory (): Promise<boolean> {
    while (this.queue.length === 0 && this.history !== undefined && !this.done) await this.pullPage(this.history)
    return this.history === undefined && this.historyBuffered === 0
  }

  /** One page from the log (one pull at a time, whoever asks); the subscription ending comes first. */
  private async pullPage (source: HistorySource): Promise<void> {
    this.pulling ??= source.pull(this).then(undefined, (err: unknown) => {
      this.fail(toAapError(err))
    }).finally(() => { this.pulling = undefined })
    await Promise.race([this.pulling, this.ended.promise])
  }

  private accept (event: AgentEvent, bounded: boolean): void {
    if (this.done) return
    const at = this.position(event.run_id)
    if (event.seq <= at) return
    if (event.seq !== at + 1) {
      // the service only hands out contiguous logs; anything else is a bug, never an out-of-order yield
      this.fail(new AapError('INTERNAL', `subscription of ${this.correlation_id} was handed ${event.run_id}#${event.seq} after #${at}`, { reason: 'order' }))
      return
    }
    this.cursor.set(event.run_id, event.seq)
    if (this.onEvent !== undefined) {
      try {
        this.onEvent(event)
      } catch (err) {
        // a consumer's callback never breaks delivery: its failures are counted for the consumer to see
        this.callbackErrors++
        this.lastCallbackError = err
      }
      return
    }
    const w = this.waiters.shift()
    if (w !== undefined) {
      w.resolve({ value: event, done: false })
      return
    }
    if (bounded && this.queue.length >= this.maxBuffered) {
      this.fail(new SubscriberOverflowError(this.correlation_id, this.maxBuffered))
      return
    }
    this.queue.push(event)
  }

  /**
   * The executor's own event at the seq of a liveness verdict handed out
   * before: it is handed out too, as the run's event at that seq from now on
   * (protocols/liveness.md). The only event ever handed out twice for a seq.
   */
  supersede (event: AgentEvent): void {
    if (this.history !== undefined) {
      // the catch-up may have read the verdict already: settled on its next locked step. As many as a live
      // queue holds: a delegator and executor that alternate verdicts and replacements (one per seq of a
      // run) could otherwise grow this without end while the subscriber does not read its history
      const pending = (this.superseding ??= [])
      if (pending.length >= this.maxBuffered) {
        this.fail(new SubscriberOverflowError(this.correlation_id, this.maxBuffered))
        return
      }
      pending.push(event)
      return
    }
    if (this.position(event.run_id) === event.seq) this.cursor.set(event.run_id, event.seq - 1)
    this.deliver(event)
  }

  /** End the subscription with an error the iterator throws (after what it already buffered). */
  fail (err: AapError): void {
    if (this.done) return
    this.failure = err
    this.finish()
  }

  close (): void {
    if (this.done) return
    this.finish()
  }

  private finish (): void {
    this.done = true
    this.signal?.removeEventListener('abort', this.onAbort)
    this.onClose(this)
    this.ended.resolve()
    // the oldest waiting call gets the failure, if any; every other one the end
    for (const w of this.waiters.splice(0)) {
      const f = this.failure
      this.failure = undefined
      if (f !== undefined) w.reject(f)
      else w.resolve({ value: undefined, done: true })
    }
  }

  async next (): Promise<IteratorResult<AgentEvent>> {
    for (;;) {
      const e = this.queue.shift()
      if (e !== undefined) {
        if (this.historyBuffered > 0) this.historyBuffered--
        return { value: e, done: false }
      }
      if (this.failure !== undefined) {
        const f = this.failure
        this.failure = undefined
        throw f
      }
      if (this.done) return { value: undefined, done: true }
      const source = this.history
      if (source === undefined) {
        const w = Promise.withResolvers<IteratorResult<AgentEvent>>()
        this.waiters.push(w)
        return w.promise
      }
      // behind the log: read the next page
      await this.pullPage(source)
    }
  }

  async return (): Promise<IteratorResult<AgentEvent>> {
    this.queue.length = 0
    this.historyBuffered = 0
    this.close()
    return { value: undefined, done: true }
  }

  [Symbol.asyncIterator] (): this {
    return this
  }
}
