/**
 * The mesh runs behind one agent's A2A tasks, as the inbound server tracks
 * them. While an execution of the SDK runs (a SendMessage), the run's events
 * go to that execution's bus and the SDK saves them to the task. Once the
 * run blocks the execution ends, the task waits for input, and a watch stays
 * on the run: a cancel, a failure, a handoff or a resume made outside A2A
 * (the delegator, an authorized agent, the local API) is saved to the task
 * here and published on the bus the SDK keeps for it, so GetTask and
 * SubscribeToTask see it. A resume from outside A2A sets the task WORKING
 * and the watch follows the run on, as an execution would, until it blocks
 * again or ends.
 *
 * An A2A resume claims the watch (it holds back) from before its mesh call
 * until the SDK runs the executor, which then follows the resumed run; a
 * claim that ends another way (the call failed, the SDK refused the message)
 * reads the run's events again from its log.
 *
 * A watch is a subscription, and holds one of the node's correlation topics
 * (MAX_CORRELATION_TOPICS) where the delegator's own tracking of a blocked
 * run would yield its topic to a new subscriber. So the watches of one
 * server's handlers are bounded together (WatchBudget, A2A_INPUT_WATCHES_MAX,
 * a quarter of the topics): past it the watch of the task that has waited
 * longest goes, and a new task whose run cannot be followed for want of a
 * topic takes one from the oldest watch first. Each watch goes with its
 * task (evicted, canceled) and all of them with close(). A task whose watch
 * went has its run read again when a client reads it (task-refresh.ts).
 *
 * A subscription refused because the run's correlation is busy on this node
 * (a slow disk) is tried again, at most A2A_BUSY_RETRIES_MAX times; then the
 * run goes on unfollowed (neither the run canceled nor the task failed for a
 * local stall): its execution ends with the run as read then
 * (task-refresh.ts), and later reads bring it up to date as they do a task
 * whose watch went.
 */
import { AgentEvent as Bus, ResultManager, ServerCallContext, type DefaultExecutionEventBusManager, type ExecutionEventBus, type TaskStore } from '@a2a-js/sdk/server'
import type { A2AError } from '@a2a-js/sdk/errors'
import { AapError, DelegationRefusedError, InvalidTransitionError } from '../errors.ts'
import type { EventSubscription } from '../events/subscription.ts'
import type { Logger } from '../logger.ts'
import type { MeshNode } from '../node.ts'
import type { CapabilityRef } from '../card/card.ts'
import type { AgentEvent, Run } from '../runlog/types.ts'
import { Limiter } from '../util/concurrency.ts'
import { A2A_BUSY_RETRIES_MAX, A2A_DROPPED_RUN_CANCELS_AT_ONCE, A2A_MESH_CALL_TIMEOUT_MS, A2A_SUCCESSOR_EVENTS_KEPT_MAX } from './constants.ts'
import { capabilityOf, eventToUpdates, toA2aError, type TaskUpdate } from './mapping.ts'
import { gatewayStats, gatewayTotals, type A2aGatewayStats } from './stats.ts'

export interface TaskIds { taskId: string, contextId: string }

/** The run of one task, as tracked here. */
export interface Tracked {
  runId: string
  /** The capability of the run (a handoff's run.started names the next run's). */
  capability: CapabilityRef
  /** The correlation of the run (and of the runs it hands off to). */
  readonly correlationId: string
  readonly ids: TaskIds
  /** Events of the run up to this seq are in the task already. */
  seen: number
  /** The task reached a final state, or was dropped: later events are not published. */
  finished: boolean
  /** The bus of the SDK execution that publishes the run now; undefined while none runs (the task waits for input, or a resume from outside A2A set it working). */
  bus: ExecutionEventBus | undefined
  /** The run is blocked: the task waits for input. */
  waiting: boolean
  /** An A2A resume is under way: events are left to the execution it starts (or read again when it does not). */
  claimed: boolean
  sub?: EventSubscription
  /** Settled when the execution's part ends (the run blocked or ended, the task was dropped, the handler closes). */
  readonly done: PromiseWithResolvers<void>
  /** Saves and publishes of events no execution carries, in order. */
  chain: Promise<void>
  /**
   * Events of handoff successors (runs whose run.started names a handoff_from) that came before the run they
   * continue handed off to them: a subscription's history is replayed run by run in run id order, not handoff order.
   * A handoff to one of them goes on with its events kept here (at most A2A_SUCCESSOR_EVENTS_KEPT_MAX).
   */
  kept?: SuccessorEvents
}

export interface TaskRunsHost {
  node: MeshNode
  log: Logger
  store: TaskStore
  buses: DefaultExecutionEventBusManager
  /** Aborted when the handler closes. */
  stopping: AbortSignal
  /** Tries again of a subscription refused for a busy correlation before the run is left unfollowed (default A2A_BUSY_RETRIES_MAX). */
  busyRetriesMax?: number
}

/**
 * The watches of one server's handlers, bounded together; the task that
 * has waited longest first. A watch dropped leaves its task as it was until
 * a client reads it (task-refresh.ts reads its run again then).
 */
export class WatchBudget {
  readonly max: number
  private readonly held = new Map<Tracked, () => void>()

  constructor (max: number) {
    this.max = max
  }

  get size (): number {
    return this.held.size
  }

  /** `t` waits for input (again): it is the newest watch; past the bound the oldest other one is dropped. */
  add (t: Tracked, drop: () => void): void {
    this.held.delete(t)
    this.held.set(t, drop)
    if (this.held.size > this.max) this.dropOldest(t)
  }

  remove (t: Tracked): void {
    this.held.delete(t)
  }

  /** Drop the watch of the task that has waited longest (not `keep`, nor one an A2A resume claimed); false when there is none. */
  dropOldest (keep?: Tracked): boolean {
    for (const [t, drop] of this.held) {
      if (t === keep || t.claimed) continue
      this.held.delete(t)
      drop()
      return true
    }
    return false
  }
}

/**
 * Events of a task's handoff successors met before the run they continue handed off to them, so a handoff goes
 * on with them: only runs whose run.started names this task's run (or a run kept) as handoff_from are kept (the
 * correlation, an A2A context, carries other tasks' runs and successors too), at most A2A_SUCCESSOR_EVENTS_KEPT_MAX
 * events (past it the oldest goes, the first of them told to `dropped`).
 */
export class SuccessorEvents {
  private readonly runs = new Set<string>()
  private readonly events: AgentEvent[] = []
  /** Told of the first event that goes (a task logs it once). */
  private readonly dropped: (e: AgentEvent) => void
  private told = false

  constructor (dropped: (e: AgentEvent) => void) {
    this.dropped = dropped
  }

  /** Keep `e` if its run continues `current` (the task's run) or a run kept already: never another task's successors. */
  offer (e: AgentEvent, current: string): void {
    const from = e.payload.handoff_from as { run_id?: unknown } | null | undefined
    if (e.type === 'run.started' && typeof from?.run_id === 'string' && (from.run_id === current || this.runs.has(from.run_id))) {
      this.runs.add(e.run_id)
      // the runs known are bounded as their events are: the one met first goes
      if (this.runs.size > A2A_SUCCESSOR_EVENTS_KEPT_MAX) for (const r of this.runs) { this.runs.delete(r); break }
    }
    if (!this.runs.has(e.run_id) || this.events.some((k) => k.run_id === e.run_id && k.seq === e.seq)) return
    this.events.push(e)
    const oldest = this.events.length > A2A_SUCCESSOR_EVENTS_KEPT_MAX ? this.events.shift() : undefined
    if (oldest === undefined || this.told) return
    this.told = true
    this.dropped(oldest)
  }

  /** The events kept of `runId`, in seq order; they are kept no more. */
  take (runId: string): AgentEvent[] {
    const mine = this.events.filter((k) => k.run_id === runId).sort((a, b) => a.seq - b.seq)
    if (mine.length > 0) this.events.splice(0, this.events.length, ...this.events.filter((k) => k.run_id !== runId))
    this.runs.delete(runId)
    return mine
  }
}

function isTopicLimit (err: unknown): boolean {
  return err instanceof AapError && err.details?.reason === 'topic_limit'
}

/** The run's correlation stayed too far behind on this node's lock for a subscription's whole wait (src/events/lock-queues.ts): no fault of the run. */
function isCorrelationBusy (err: unknown): boolean {
  return err instanceof AapError && err.code === 'TIMEOUT' && err.details?.reason === 'correlation_busy'
}

/** The context of saves made here: the same scope and write lock as the SDK's own for the unauthenticated callers it serves. */
/** The context of the store reads and writes no client call makes (the store ignores it). */
export const CONTEXT = new ServerCallContext()

export class TaskRuns {
  private readonly host: TaskRunsHost
  private readonly tracked = new Map<string, Tracked>()
  private readonly budget: WatchBudget
  /**
   * Watches dropped (past the bound, or for a new task's follower); events that could not be saved to their task;
   * watches that could not start; subscriptions tried again because the run's correlation was busy here; runs left
   * unfollowed after busyRetriesMax such tries (stats.ts). The node's totals (its metrics) count them too.
   */
  readonly stats: A2aGatewayStats = gatewayStats()
  private readonly totals: A2aGatewayStats
  private readonly busyRetriesMax: number

  constructor (host: TaskRunsHost, budget: WatchBudget) {
    this.host = host
    this.budget = budget
    this.totals = gatewayTotals(host.node)
    this.busyRetriesMax = host.busyRetriesMax ?? A2A_BUSY_RETRIES_MAX
  }

  private count (what: keyof A2aGatewayStats): void {
    this.stats[what]++
    this.totals[what]++
  }

  /** Tasks whose runs have work under way (followed for an execution, or working again after a resume from outside A2A). */
  get following (): number {
    let n = 0
    for (const t of this.tracked.values()) if (!t.waiting) n++
    return n
  }

  /** Tasks waiting for input whose runs are watched. */
  get watching (): number {
    let n = 0
    for (const t of this.tracked.values()) if (t.waiting) n++
    return n
  }

  get (taskId: string): Tracked | undefined {
    return this.tracked.get(taskId)
  }

  /**
   * An execution's part: publish the run's events on `bus` until the run blocks (then it is watched) or ends. False
   * when the run was left unfollowed (its correlation stayed busy here): the caller publishes the run as it is now.
   */
  async follow (run: Run, ids: TaskIds, bus: ExecutionEventBus): Promise<boolean> {
    const t = this.track(run, ids, bus)
    try {
      if (!await this.openPatiently(t, true)) return false
    } catch (err) {
      this.host.log.warn({ err: (err as Error).message, run_id: run.run_id }, 'a2a: cannot follow the run\'s events')
      // the task fails with this error: its run is canceled, so no work goes on whose end no client would see
      this.finish(t)
      await this.host.node.cancel(run.run_id, 'the A2A server could not follow the run', { signal: AbortSignal.timeout(A2A_MESH_CALL_TIMEOUT_MS) }).catch((cancelErr: unknown) => {
        this.host.log.warn({ err: (cancelErr as Error).message, run_id: run.run_id }, 'a2a: a run it could not follow could not be canceled either')
      })
      throw err
    }
    const onClose = (): void => { t.done.resolve() }
    this.host.stopping.addEventListener('abort', onClose, { once: true })
    try {
      await t.done.promise
    } finally {
      this.host.stopping.removeEventListener('abort', onClose)
      // blocked: the watch goes on; over or dropped: nothing is kept
      t.bus = undefined
    }
    return true
  }

  /** Watch a run no execution follows (it blocked before one could, or a resume of it reached none). */
  async watch (run: Run, ids: TaskIds): Promise<void> {
    const t = this.track(run, ids, undefined)
    try {
      await this.openPatiently(t, false)
    } catch (err) {
      this.count('watchErrors')
      this.host.log.warn({ err: (err as Error).message, run_id: run.run_id, task_id: ids.taskId }, 'a2a: cannot watch the run of a task waiting for input; the task shows no later move of it')
      this.finish(t)
    }
  }

  /** An A2A resume of the task is under way: its watch holds back. Undefined when none is kept; throws when another resume has it. */
  claim (taskId: string): Tracked | undefined {
    const t = this.tracked.get(taskId)
    if (t === undefined || !t.waiting) return undefined
    if (t.claimed) throw new InvalidTransitionError(`task ${taskId.slice(0, 128)} is being resumed already`, { reason: 'resume_in_progress' })
    t.claimed = true
    return t
  }

  /** A claim whose resume reached no execution: the watch reads the run's events again (the resume among them, if it was made). */
  async release (t: Tracked): Promise<void> {
    if (!t.claimed || t.finished || this.tracked.get(t.ids.taskId) !== t) return
    t.claimed = false
    t.sub?.close()
    try {
      await this.openPatiently(t, false)
    } catch (err) {
      this.count('watchErrors')
      this.host.log.warn({ err: (err as Error).message, run_id: t.runId, task_id: t.ids.taskId }, 'a2a: cannot watch the run again after a resume that reached no execution')
      this.finish(t)
    }
  }

  /** Stop tracking the task's run (a new execution takes it, the task was canceled or evicted). */
  drop (taskId: string): void {
    const t = this.tracked.get(taskId)
    if (t !== undefined) this.finish(t)
  }

  close (): void {
    for (const t of [...this.tracked.values()]) this.finish(t)
  }

  private track (run: Run, ids: TaskIds, bus: ExecutionEventBus | undefined): Tracked {
    this.drop(ids.taskId)
    const t: Tracked = {
      runId: run.run_id, capability: run.capability, correlationId: run.correlation_id, ids, seen: run.last_seq, finished: false, bus, waiting: false, claimed: false,
      done: Promise.withResolvers<void>(), chain: Promise.resolve()
    }
    this.tracked.set(ids.taskId, t)
    if (run.state === 'blocked') this.waits(t)
    return t
  }

  /**
   * Open the run's subscription, again each time the correlation is too busy here: each try waits for its lock
   * (at most EVENTS_SUBSCRIBE_BUSY_WAIT_MS), so a slow disk costs the task a wait, not its run, and tries are
   * that far apart. With `yieldWatches`, a topic_limit takes the topic of the watch that has waited longest.
   * Past busyRetriesMax tries again the run is left unfollowed, as a task whose watch was dropped is (false): its
   * run goes on, and its task keeps what it shows until a client reads it (task-refresh.ts reads the run then).
   */
  private async openPatiently (t: Tracked, yieldWatches: boolean): Promise<boolean> {
    // tries again made for a busy correlation (a topic taken from a watch is not one)
    let tries = 0
    for (;;) {
      try {
        await this.open(t)
        return true
      } catch (err) {
        if (t.finished || this.host.stopping.aborted) throw err
        // work goes before watches: a task waiting for input gives its topic to the new one's follower
        if (yieldWatches && isTopicLimit(err) && this.budget.dropOldest()) continue
        if (!isCorrelationBusy(err)) throw err
        if (tries >= this.busyRetriesMax) {
          this.count('busyGaveUp')
          this.host.log.warn({ err: (err as Error).message, run_id: t.runId, task_id: t.ids.taskId, tries, limit: this.busyRetriesMax }, 'a2a: the run\'s task stayed busy on this node (a slow disk) past A2A_BUSY_RETRIES_MAX tries: its run goes on unfollowed, and its task is brought up to date when a client reads it')
          this.finish(t)
          return false
        }
        tries++
        this.count('busyRetries')
        this.host.log.warn({ err: (err as Error).message, run_id: t.runId, task_id: t.ids.taskId, tries, limit: this.busyRetriesMax }, 'a2a: the run\'s task is busy on this node (a slow disk): it is followed once its lock catches up')
      }
    }
  }

  /** Subscribe to the run's correlation (with its history: events already in the task are skipped by seq). */
  private async open (t: Tracked): Promise<void> {
    const sub = await this.host.node.events.subscribe(t.correlationId, {
      runs: [t.runId],
      onEvent: (e) => { this.onEvent(t, e) },
      signal: this.host.stopping
    })
    if (t.finished || this.host.stopping.aborted) {
      sub.close()
      t.done.resolve()
      return
    }
    t.sub = sub
    if (sub.closed) this.finish(t)
  }

  private onEvent (t: Tracked, e: AgentEvent): void {
    if (t.finished || t.claimed) return
    if (e.run_id !== t.runId) {
      // a run this one may yet hand off to, met first (history in run id order, or its start before this run's end)
      t.kept ??= new SuccessorEvents((dropped) => {
        this.host.log.warn({ task_id: t.ids.taskId, run_id: t.runId, dropped_run_id: dropped.run_id, seq: dropped.seq, limit: A2A_SUCCESSOR_EVENTS_KEPT_MAX }, 'a2a: a task keeps no more events of runs a handoff may pass it to (A2A_SUCCESSOR_EVENTS_KEPT_MAX): the oldest go (logged once per task)')
      })
      t.kept.offer(e, t.runId)
      return
    }
    if (e.seq <= t.seen) return
    t.seen = e.seq
    if (e.type === 'run.started') t.capability = capabilityOf(e.payload.capability) ?? t.capability
    const updates = eventToUpdates(e, t.ids, t.capability)
    const link = e.payload.handoff_to as { run_id?: unknown } | undefined
    const handoff = e.type === 'run.completed' && typeof link?.run_id === 'string'
    const terminal = !handoff && (e.type === 'run.completed' || e.type === 'run.failed')
    if (handoff) {
      t.runId = link.run_id as string
      t.seen = 0
    }
    if (e.type === 'run.blocked') this.waits(t)
    else {
      // working again (a resume from outside A2A, a handoff) or over: work, not a watch
      t.waiting = false
      this.budget.remove(t)
    }
    const bus = t.bus
    if (bus !== undefined) {
      for (const u of updates) bus.publish(toBusEvent(u))
      // blocked: the execution ends here (the SDK keeps its bus for the input-required task) and the watch goes on
      if (e.type === 'run.blocked') {
        t.bus = undefined
        t.done.resolve()
      }
      if (terminal) this.finish(t)
    } else {
      t.chain = t.chain.then(async () => { await this.apply(t, updates, terminal) }).catch((err: unknown) => {
        this.count('saveErrors')
        this.host.log.warn({ err: (err as Error).message, task_id: t.ids.taskId, run_id: e.run_id, event: e.type }, 'a2a: cannot save a watched run\'s event to its task')
      })
      if (terminal) this.finish(t)
    }
    // the successor's events that came first go on now, in seq order (they will not come again)
    if (handoff) for (const k of t.kept?.take(t.runId) ?? []) this.onEvent(t, k)
  }

  /** Save the updates to the task (no execution's ResultManager does), then publish them to its subscribers. */
  private async apply (t: Tracked, updates: TaskUpdate[], terminal: boolean): Promise<void> {
    // dropped meanwhile (evicted, or a new execution follows the run from its own start): nothing to keep
    if (t.finished && !terminal) return
    await saveToTask(this.host, t.ids.taskId, updates, terminal)
  }

  /** The task waits for input: it joins the watches (as the newest); past the bound the oldest one goes. */
  private waits (t: Tracked): void {
    t.waiting = true
    this.budget.add(t, () => {
      this.count('watchesDropped')
      this.host.log.warn({ task_id: t.ids.taskId, run_id: t.runId, limit: this.budget.max }, 'a2a: a task waiting for input gave up its watch (bound, or a topic for new work): its run\'s later moves reach it no more')
      this.finish(t)
    })
  }

  private finish (t: Tracked): void {
    this.budget.remove(t)
    t.finished = true
    t.kept = undefined
    t.sub?.close()
    t.done.resolve()
    if (this.tracked.get(t.ids.taskId) === t) this.tracked.delete(t.ids.taskId)
  }
}

/**
 * Save updates no execution carries to a task (a watched run's events, a
 * run read again: task-refresh.ts), then publish them to its subscribers.
 */
export async function saveToTask (host: Pick<TaskRunsHost, 'store' | 'buses'>, taskId: string, updates: TaskUpdate[], terminal: boolean): Promise<void> {
  const saver = new ResultManager(host.store, CONTEXT)
  for (const u of updates) {
    const ev = toBusEvent(u)
    await saver.processEvent(ev)
    // a task that goes on keeps a bus, as the SDK keeps one for an input-required task, so subscribers can attach
    const bus = terminal ? host.buses.getByTaskId(taskId) : host.buses.createOrGetByTaskId(taskId)
    bus?.publish(ev)
  }
  if (terminal) {
    host.buses.getByTaskId(taskId)?.finished()
    host.buses.cleanupByTaskId(taskId)
  }
}

export function toBusEvent (u: TaskUpdate): ReturnType<typeof Bus.statusUpdate> | ReturnType<typeof Bus.artifactUpdate> {
  return u.kind === 'statusUpdate' ? Bus.statusUpdate(u.data) : Bus.artifactUpdate(u.data)
}

/** Cancel the runs of tasks dropped (or never kept), A2A_DROPPED_RUN_CANCELS_AT_ONCE at a time; never throws (each failure logged). */
export async function cancelRuns (node: MeshNode, log: Logger, runs: Array<{ taskId: string, runId: string }>, reason: string): Promise<void> {
  const limiter = new Limiter(A2A_DROPPED_RUN_CANCELS_AT_ONCE)
  await Promise.all(runs.map(async ({ taskId, runId }) => {
    await limiter.run(async () => {
      try {
        const run = await node.cancel(runId, reason, { signal: AbortSignal.timeout(A2A_MESH_CALL_TIMEOUT_MS) })
        log.info({ task_id: taskId, run_id: runId, state: run.state, reason }, 'a2a: the run of a dropped task was canceled')
      } catch (err) {
        log.warn({ err: (err as Error).message, task_id: taskId, run_id: runId, reason }, 'a2a: the run of a dropped task could not be canceled; it goes on with no A2A task')
      }
    })
  }))
}

/** The reason a run is canceled with when the server closed before its task was kept. */
export const CLOSED_BEFORE_KEPT = 'the A2A server closed before it kept the run\'s task'

/** The reason a run is canceled with when the SDK refused its SendMessage after the run started (no task shows it). */
export const REFUSED_BEFORE_KEPT = 'the A2A SDK refused the message after its run started: no task shows the run'

/** What a SendMessage caught by close() fails with: DELEGATION_REFUSED, reason closing (its run is canceled). */
export function closedBeforeKept (run: Run): A2AError {
  return toA2aError(new DelegationRefusedError(`the A2A server closed before it kept the task of run ${run.run_id}; the run is canceled`, { reason: 'closing', run_id: run.run_id }))
}
