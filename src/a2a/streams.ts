/**
 * The streams of one agent's A2A server, ended with their clients, and
 * bounded: A2A_SUBSCRIBERS_MAX_PER_TASK per task, A2A_STREAMS_MAX for the
 * whole server (a StreamBudget its agents share).
 *
 * SubscribeToTask is the SDK's resubscribe, made here so that it can be
 * bounded (A2A_SUBSCRIBERS_MAX_PER_TASK open at once on one task) and ended:
 * on a task waiting for input the SDK keeps the task's bus, and its stream
 * waited for the next event with no regard for its client, so each client
 * gone had left a listener on the bus, a pending generator and a response
 * until the task moved on, forever if it never did. Here the wait ends when
 * the client's response closes (server.ts hands each request a ClientUser
 * carrying that signal) or the handler closes.
 *
 * A SendStreamingMessage stream whose client goes ends its response at
 * once; the SDK's stream behind it is read on to its end without a reader,
 * since it is what saves the task's events while its execution runs (it
 * ends when the run blocks or ends).
 */
import type { StreamResponse } from '@a2a-js/sdk'
import { ExecutionEventQueue, type DefaultExecutionEventBusManager, type ServerCallContext, type TaskStore, type User } from '@a2a-js/sdk/server'
import { RequestMalformedError, TaskNotFoundError, UnsupportedOperationError } from '@a2a-js/sdk/errors'
import type { Logger } from '../logger.ts'
import { isFinalState } from './mapping.ts'

/** The caller of one A2A request: unauthenticated (the SDK's scope for it), with the signal of its response closing. */
export class ClientUser implements User {
  readonly closed: AbortSignal
  constructor (closed: AbortSignal) {
    this.closed = closed
  }

  get isAuthenticated (): boolean {
    return false
  }

  get userName (): string {
    return ''
  }
}

/** Aborted when the request's client is gone (its response closed), if the request came through server.ts. */
export function closedSignal (context: ServerCallContext): AbortSignal | undefined {
  const user = context.user
  return user instanceof ClientUser ? user.closed : undefined
}

/** A SubscribeToTask past the bound of open streams on one task (an A2A UnsupportedOperationError on the wire). */
export class TooManySubscribersError extends UnsupportedOperationError {
  constructor (taskId: string, limit: number) {
    super({ message: `task ${taskId.slice(0, 128)} has ${limit} subscribers already`, metadata: { reason: 'subscribers', limit: String(limit) } })
    // the SDK maps errors to codes by name
    this.name = 'UnsupportedOperationError'
  }
}

/** A stream past the bound of open streams of the whole server (an A2A UnsupportedOperationError on the wire, as TooManySubscribersError). */
export class TooManyStreamsError extends UnsupportedOperationError {
  constructor (limit: number) {
    super({ message: `this server has ${limit} streams open already`, metadata: { reason: 'streams', limit: String(limit) } })
    // the SDK maps errors to codes by name
    this.name = 'UnsupportedOperationError'
  }
}

/** Streams open at once on a whole server, all its agents together (SubscribeToTask and SendStreamingMessage). */
export class StreamBudget {
  readonly max: number
  /** Streams open now. */
  open = 0
  /** Streams refused past `max`. */
  refused = 0

  constructor (max: number) {
    this.max = max
  }

  /** Take one stream, or throw TooManyStreamsError. */
  take (): void {
    if (this.open >= this.max) {
      this.refused++
      throw new TooManyStreamsError(this.max)
    }
    this.open++
  }

  give (): void {
    this.open = Math.max(0, this.open - 1)
  }
}

export class TaskStreams {
  private readonly store: TaskStore
  private readonly buses: DefaultExecutionEventBusManager
  private readonly log: Logger
  private readonly maxPerTask: number
  /** The server's bound on open streams (shared by its agents). */
  readonly budget: StreamBudget
  /** Open SubscribeToTask streams per task. */
  private readonly open = new Map<string, number>()
  /** Ends each open stream (the handler closes). */
  private readonly stops = new Set<() => void>()
  /** Streams ended because their client went; SubscribeToTask refused past the bound; SDK streams read on without a client. */
  readonly stats = { clientGone: 0, refused: 0, detached: 0 }

  constructor (store: TaskStore, buses: DefaultExecutionEventBusManager, log: Logger, maxPerTask: number, budget: StreamBudget) {
    this.store = store
    this.buses = buses
    this.log = log
    this.maxPerTask = maxPerTask
    this.budget = budget
  }

  /** Open SubscribeToTask streams on a task. */
  subscribers (taskId: string): number {
    return this.open.get(taskId) ?? 0
  }

  /** SubscribeToTask: the task as it is, then its bus's events until a final or input-required state, the client goes or the handler closes. */
  async * subscribe (taskId: string, context: ServerCallContext): AsyncGenerator<StreamResponse, void, undefined> {
    if (taskId.trim() === '') throw new RequestMalformedError('a SubscribeToTask names no task')
    const n = this.subscribers(taskId)
    if (n >= this.maxPerTask) {
      this.stats.refused++
      throw new TooManySubscribersError(taskId, this.maxPerTask)
    }
    this.budget.take()
    this.open.set(taskId, n + 1)
    const bus = this.buses.getByTaskId(taskId, context)
    const queue = bus === undefined ? undefined : new ExecutionEventQueue(bus)
    const closed = closedSignal(context)
    const stop = (): void => { queue?.stop() }
    const gone = (): void => {
      this.stats.clientGone++
      stop()
    }
    this.stops.add(stop)
    closed?.addEventListener('abort', gone, { once: true })
    try {
      if (closed?.aborted === true) return
      const task = await this.store.load(taskId, context)
      if (task === undefined) throw new TaskNotFoundError(`no task ${taskId.slice(0, 128)} on this agent`)
      // an ended task has no more events: GetTask reads it
      if (task.status !== undefined && isFinalState(task.status.state)) {
        throw new UnsupportedOperationError(`task ${task.id.slice(0, 128)} has ended (${task.status.state}): there is nothing to subscribe to`)
      }
      yield { payload: { $case: 'task', value: task } }
      if (queue === undefined) return
      for await (const event of queue.events()) {
        if (event.kind === 'statusUpdate' && event.data.taskId === taskId) yield { payload: { $case: 'statusUpdate', value: event.data } }
        else if (event.kind === 'artifactUpdate' && event.data.taskId === taskId) yield { payload: { $case: 'artifactUpdate', value: event.data } }
        else if (event.kind === 'task' && event.data.id === taskId) yield { payload: { $case: 'task', value: event.data } }
      }
    } finally {
      queue?.stop()
      closed?.removeEventListener('abort', gone)
      this.stops.delete(stop)
      this.budget.give()
      const left = this.subscribers(taskId) - 1
      if (left > 0) this.open.set(taskId, left)
      else this.open.delete(taskId)
    }
  }

  /**
   * The SDK's SendStreamingMessage stream, ended for its client when the
   * client goes or the handler closes; the SDK's stream is then read on to
   * its end. `onEnd` is called once, when the SDK's stream is over. The
   * caller took the stream from the budget (before its mesh call); it is
   * given back when the client's stream ends.
   */
  async * untilClosed (inner: AsyncGenerator<StreamResponse, void, undefined>, context: ServerCallContext, onEnd: () => void): AsyncGenerator<StreamResponse, void, undefined> {
    const it = inner[Symbol.asyncIterator]()
    const left = Promise.withResolvers<'left'>()
    const leave = (): void => { left.resolve('left') }
    const closed = closedSignal(context)
    closed?.addEventListener('abort', leave, { once: true })
    if (closed?.aborted === true) leave()
    this.stops.add(leave)
    let over = false
    let pending: Promise<IteratorResult<StreamResponse, void>> | undefined
    try {
      for (;;) {
        pending = it.next()
        const r = await Promise.race([pending, left.promise])
        if (r === 'left') {
          this.stats.clientGone++
          return
        }
        pending = undefined
        if (r.done === true) {
          over = true
          return
        }
        yield r.value
      }
    } catch (err) {
      over = true
      throw err
    } finally {
      closed?.removeEventListener('abort', leave)
      this.stops.delete(leave)
      this.budget.give()
      if (over) onEnd()
      else this.readOn(it, pending, onEnd)
    }
  }

  /** End every open stream (the handler closes). */
  close (): void {
    for (const stop of [...this.stops]) stop()
  }

  /** Read an SDK stream with no client left to its end (its execution's events are saved as it is read). */
  private readOn (it: AsyncIterator<StreamResponse, void>, pending: Promise<IteratorResult<StreamResponse, void>> | undefined, onEnd: () => void): void {
    this.stats.detached++
    const drain = async (): Promise<void> => {
      if (pending !== undefined && (await pending).done === true) return
      for (;;) if ((await it.next()).done === true) return
    }
    drain().catch((err: unknown) => {
      this.log.warn({ err: (err as Error).message }, 'a2a: a stream whose client went failed while read on')
    }).finally(onEnd)
  }
}
