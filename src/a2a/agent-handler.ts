/**
 * One mesh agent as an A2A v1.0 agent: the SDK's DefaultRequestHandler (task
 * store, blocking and streaming sends, SubscribeToTask, ListTasks) with an
 * executor that drives a mesh run, behind a front that turns each request
 * into its mesh call first, so a refused delegation or a bad resume is an
 * A2A JSON-RPC error and not a failed task:
 *
 *   SendMessage (new task)          -> node.delegate (task_id = context_id = contextId = correlation_id:
 *                                      a new task in a context is the next turn of its conversation)
 *   SendMessage (on input-required) -> node.resume with the resolution DataPart
 *   CancelTask                      -> node.cancel
 *   run events                      -> status and artifact updates (mapping.ts)
 *
 * A task waiting for input keeps a watch on its run, so a move made outside
 * A2A reaches it (task-runs.ts); one whose watch went has its run read again
 * when a client reads it (task-refresh.ts); streams end with their clients
 * (streams.ts).
 */
import { randomUUID } from 'node:crypto'
import type {
  AgentCard as A2aCard, CancelTaskRequest, DeleteTaskPushNotificationConfigRequest, GetExtendedAgentCardRequest,
  GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest, ListTaskPushNotificationConfigsResponse,
  ListTasksRequest, ListTasksResponse, Message, SendMessageRequest, StreamResponse, SubscribeToTaskRequest, Task, TaskPushNotificationConfig
} from '@a2a-js/sdk'
import { TaskState } from '@a2a-js/sdk'
import {
  AgentEvent as Bus, DefaultRequestHandler, type A2ARequestHandler, type AgentExecutor,
  type ExecutionEventBus, type RequestContext, type ServerCallContext
} from '@a2a-js/sdk/server'
import { A2AError, RequestMalformedError, TaskNotFoundError, UnsupportedOperationError } from '@a2a-js/sdk/errors'
import type { AgentCard as MeshCard } from '../card/card.ts'
import type { Logger } from '../logger.ts'
import type { MeshNode } from '../node.ts'
import type { Run } from '../runlog/types.ts'
import {
  A2A_INPUT_WATCHES_MAX, A2A_LIST_REFRESH_MAX, A2A_MESH_CALL_TIMEOUT_MS, A2A_STREAMS_MAX, A2A_SUBSCRIBERS_MAX_PER_TASK, A2A_TASKS_MAX_BYTES_PER_AGENT,
  A2A_TASKS_MAX_PER_AGENT
} from './constants.ts'
import { readDelegate, readResume, resumeCheckpointOf, runIdOf, runToTask, toA2aError } from './mapping.ts'
import { StreamBudget, TaskStreams } from './streams.ts'
import { TaskRefresher } from './task-refresh.ts'
import { cancelRuns, CLOSED_BEFORE_KEPT, closedBeforeKept, REFUSED_BEFORE_KEPT, TaskRuns, WatchBudget, type TaskIds, type Tracked } from './task-runs.ts'
import type { TaskRecords } from './task-records.ts'
import { BoundedTaskStore, listView, type Reservation, type TaskBytesPool } from './task-store.ts'
import { cancelExecution, cancelTask, checkReferences, type CancelHost } from './task-cancel.ts'
import { TaskBuses } from './task-buses.ts'

/** contextId doubles as the mesh correlation id (a TaskId). */
const CORRELATION_ID = /^[A-Za-z0-9._:/-]{1,128}$/

/** The mesh call made for a SendMessage, waiting for the executor the SDK then calls. */
interface Prepared {
  /** The message's id: its entry in `prepared`, and its claim in `claimed`. */
  messageId: string
  run: Run
  /** The SDK ran the executor with it. */
  taken: boolean
  /** A resume: the task it resumed, and the watch it claimed (if one was kept). */
  resumed?: { ids: TaskIds, claim: Tracked | undefined }
  /** A new task: its place among the agent's tasks, and its id once the executor knows it. */
  reservation?: Reservation
  taskId?: string
  /** close() came before its task was kept: its run was canceled, and the send fails. */
  unkept?: boolean
}

export interface MeshAgentHandlerOptions {
  /** The bound on watches of tasks waiting for input this handler shares (the server's; default: one of its own of A2A_INPUT_WATCHES_MAX). */
  watches?: WatchBudget
  /** SubscribeToTask streams open at once on one task (default A2A_SUBSCRIBERS_MAX_PER_TASK). */
  maxSubscribersPerTask?: number
  /** Tasks kept (default A2A_TASKS_MAX_PER_AGENT). */
  maxTasks?: number
  /** Bytes of tasks kept (default A2A_TASKS_MAX_BYTES_PER_AGENT). */
  maxTaskBytes?: number
  /** The server's bytes of tasks, all agents together, this handler shares (default: a pool of its own, unbounded). */
  taskBytes?: TaskBytesPool
  /** The bound on open streams this handler shares (the server's; default: one of its own of A2A_STREAMS_MAX). */
  streams?: StreamBudget
  /** Where the agent's tasks are kept across restarts (default: memory only). */
  records?: TaskRecords
  /** Tries again of a run's subscription refused for a busy correlation (default A2A_BUSY_RETRIES_MAX: task-runs.ts). */
  busyRetriesMax?: number
}

export class MeshAgentHandler implements A2ARequestHandler {
  private _card: A2aCard
  readonly store: BoundedTaskStore
  private meshCard: MeshCard
  private readonly node: MeshNode
  private readonly log: Logger
  private readonly inner: DefaultRequestHandler
  /** One bus per task, whatever the request's tenant (task-buses.ts). */
  private readonly buses = new TaskBuses()
  private readonly prepared = new Map<string, Prepared>()
  /** The messageIds of sends under way, from before their first await to settle(): a retry meanwhile is refused before any run or place. */
  private readonly claimed = new Set<string>()
  private readonly stopping = new AbortController()
  /** The runs behind the tasks: followed for an execution, watched while a task waits for input. */
  readonly runs: TaskRuns
  /** SubscribeToTask and SendStreamingMessage streams, ended with their clients. */
  readonly streams: TaskStreams
  /** Reads again the runs of tasks nothing follows, when clients read the tasks. */
  readonly refresher: TaskRefresher
  /** The runs CancelTask requests canceled, by task, until the SDK's cancelTask answered (the executor says CANCELED of them). */
  private readonly canceling = new Map<string, Run>()
  private readonly cancelHost: CancelHost
  /** Tasks an A2A resume is under way on (from before its mesh call to the SDK's answer): their runs are not read again meanwhile. */
  private readonly resuming = new Map<string, number>()

  constructor (node: MeshNode, meshCard: MeshCard, card: A2aCard, log: Logger, opts: MeshAgentHandlerOptions = {}) {
    this.node = node
    this.meshCard = meshCard
    this._card = card
    this.log = log
    // a task dropped from the store takes what is kept for it here and in the SDK's bus manager (which keeps
    // the bus of an input-required task until a follow-up or a cancel that may never come)
    this.store = new BoundedTaskStore(opts.maxTasks ?? A2A_TASKS_MAX_PER_AGENT, (taskId, open) => {
      // an open task dropped (a race past the count bound): no client can reach its run again, so the run ends
      const runId = open === undefined ? undefined : this.runOf(open)
      this.runs.drop(taskId)
      this.refresher.forget(taskId)
      this.buses.cleanupByTaskId(taskId)
      if (runId !== undefined) void this.endRuns([{ taskId, runId }], 'its A2A task was dropped (the agent\'s task bound)')
    }, opts.maxTaskBytes ?? A2A_TASKS_MAX_BYTES_PER_AGENT, opts.taskBytes, opts.records?.forAgent(meshCard.agent_id))
    this.runs = new TaskRuns({ node, log, store: this.store, buses: this.buses, stopping: this.stopping.signal, busyRetriesMax: opts.busyRetriesMax }, opts.watches ?? new WatchBudget(A2A_INPUT_WATCHES_MAX))
    this.refresher = new TaskRefresher({
      node, log, store: this.store, buses: this.buses, stopping: this.stopping.signal,
      followed: (taskId) => this.runs.get(taskId) !== undefined || this.resuming.has(taskId)
    })
    this.cancelHost = { node, store: this.store, runs: this.runs, buses: this.buses }
    this.streams = new TaskStreams(this.store, this.buses, log, opts.maxSubscribersPerTask ?? A2A_SUBSCRIBERS_MAX_PER_TASK, opts.streams ?? new StreamBudget(A2A_STREAMS_MAX))
    const executor: AgentExecutor = {
      execute: async (ctx, bus) => { await this.execute(ctx, bus) },
      cancelTask: async (taskId, bus) => { await cancelExecution(this.cancelHost, taskId, bus, this.canceling.get(taskId)) }
    }
    this.inner = new DefaultRequestHandler(card, this.store, executor, this.buses)
  }

  /** Tasks whose runs have work under way (an execution follows them, or a resume from outside A2A set them working). */
  get following (): number {
    return this.runs.following
  }

  /** Tasks waiting for input whose runs are watched. */
  get watching (): number {
    return this.runs.watching
  }

  /** SendMessage requests in progress (from the mesh call before the task exists to the SDK's answer). */
  get sending (): number {
    return this.inFlight
  }

  private inFlight = 0
  /** The mesh calls of SendMessage requests under way (close() waits for them). */
  private readonly preparing = new Set<Promise<Prepared>>()
  private closing: Promise<void> | undefined
  /** SendMessage requests close() caught after their run started and before their task was kept: their runs canceled. */
  unkeptAtClose = 0

  /**
   * Stop following and watching runs and end the open streams; the tasks keep their last state, and their records
   * (the next server loads them). A SendMessage caught between its run's start and its task's first save fails
   * (DELEGATION_REFUSED, reason closing) and its run is canceled: no client could find that run again. Resolves
   * when those runs are canceled and the records written.
   */
  async close (): Promise<void> {
    this.closing ??= this.shut(false)
    await this.closing
  }

  private async shut (release: boolean): Promise<void> {
    this.stopping.abort()
    this.runs.close()
    this.streams.close()
    // a mesh call under way sees the abort: a run it started all the same is canceled there
    await Promise.allSettled([...this.preparing])
    const unkept: Array<{ taskId: string, runId: string }> = []
    for (const p of this.prepared.values()) {
      if (p.resumed !== undefined || (p.taskId !== undefined && this.store.has(p.taskId))) continue
      p.unkept = true
      unkept.push({ taskId: p.taskId ?? '', runId: p.run.run_id })
    }
    await (release ? this.store.release() : this.store.close())
    if (unkept.length === 0) return
    this.unkeptAtClose += unkept.length
    this.log.warn({ runs: unkept.map(u => u.runId) }, 'a2a: the server closed before the tasks of new runs were kept: the runs are canceled')
    await this.endRuns(unkept, CLOSED_BEFORE_KEPT)
  }

  /**
   * The handler goes for good (the server evicts it): its tasks go, and no client can reach their runs again, so
   * the run of each open task is canceled (a run left blocked would wait for ever, and hold the delegator's share
   * of its executor's runs). Resolves when every cancel has been answered or failed (each logged).
   */
  async end (reason: string): Promise<void> {
    await this.store.ready
    const open = this.openRuns()
    this.closing ??= this.shut(true)
    await this.closing
    await this.endRuns(open, reason)
  }

  /** The runs of the open tasks, the tracked one first (after a handoff the next run already). */
  private openRuns (): Array<{ taskId: string, runId: string }> {
    const out: Array<{ taskId: string, runId: string }> = []
    for (const t of this.store.openList()) {
      const runId = this.runOf(t)
      if (runId !== undefined) out.push({ taskId: t.id, runId })
    }
    return out
  }

  private runOf (task: Task): string | undefined {
    return this.runs.get(task.id)?.runId ?? runIdOf(task)
  }

  /** Cancel the runs of dropped tasks (task-runs.ts); never throws (each failure logged). */
  private async endRuns (runs: Array<{ taskId: string, runId: string }>, reason: string): Promise<void> {
    await cancelRuns(this.node, this.log, runs, reason)
  }

  // ---- the A2A surface ----------------------------------------------------------------

  async getAgentCard (): Promise<A2aCard> {
    return this._card
  }

  get card (): A2aCard {
    return this._card
  }

  /** The agent's card moved on (a newer seq): serve the new one; tasks are kept. */
  update (meshCard: MeshCard, card: A2aCard): void {
    this.meshCard = meshCard
    this._card = card
  }

  async getAuthenticatedExtendedAgentCard (params: GetExtendedAgentCardRequest, context: ServerCallContext): Promise<A2aCard> {
    return this.inner.getAuthenticatedExtendedAgentCard(params, context)
  }

  async sendMessage (params: SendMessageRequest, context: ServerCallContext): Promise<Message | Task> {
    this.inFlight++
    try {
      const p = await this.prepareOpen(params, context)
      let out: Message | Task
      try {
        out = await this.inner.sendMessage(params, context)
      } catch (err) {
        throw p.unkept === true ? closedBeforeKept(p.run) : err
      } finally {
        this.settle(p)
      }
      if (p.unkept === true) throw closedBeforeKept(p.run)
      return out
    } finally {
      this.inFlight--
    }
  }

  /** prepare(), known to close() while under way. */
  private async prepareOpen (params: SendMessageRequest, context: ServerCallContext): Promise<Prepared> {
    const call = this.prepare(params, context)
    this.preparing.add(call)
    try {
      return await call
    } finally {
      this.preparing.delete(call)
    }
  }

  async * sendMessageStream (params: SendMessageRequest, context: ServerCallContext): AsyncGenerator<StreamResponse, void, undefined> {
    // a stream past the server's bound is refused before the mesh call (untilClosed gives it back)
    this.streams.budget.take()
    this.inFlight++
    let p: Prepared
    try {
      p = await this.prepareOpen(params, context)
    } catch (err) {
      this.inFlight--
      this.streams.budget.give()
      throw err
    }
    // a client that goes ends its response; the SDK's stream is read on to its end (it saves the task's events), and only then is the request over
    yield * this.streams.untilClosed(this.inner.sendMessageStream(params, context), context, () => {
      this.settle(p)
      this.inFlight--
    })
  }

  /** GetTask: a task whose run nothing follows has its run read again first (task-refresh.ts). */
  async getTask (params: GetTaskRequest, context: ServerCallContext): Promise<Task> {
    await this.refreshStored(params.id, context)
    return this.inner.getTask(params, context)
  }

  /** The stored task brought up to date first when nothing follows its run (task-refresh.ts); never throws. */
  private async refreshStored (taskId: string, context: ServerCallContext): Promise<void> {
    const task = await this.store.load(taskId, context)
    if (task !== undefined) await this.refresher.refresh(task)
  }

  /**
   * ListTasks: the page's first A2A_LIST_REFRESH_MAX tasks whose runs nothing
   * follows have them read again, and each one saved anew takes its own place
   * on the page as it now stands (listed again, a task whose status moved
   * would move to another page, and one of an earlier page take its place).
   */
  async listTasks (params: ListTasksRequest, context: ServerCallContext): Promise<ListTasksResponse> {
    const page = await this.inner.listTasks(params, context)
    const stale = page.tasks.filter(t => this.refresher.due(t)).slice(0, A2A_LIST_REFRESH_MAX)
    const saved = new Set<string>()
    await Promise.all(stale.map(async (t) => { if (await this.refresher.refresh(t)) saved.add(t.id) }))
    if (saved.size === 0) return page
    const tasks: Task[] = []
    for (const t of page.tasks) {
      const now = saved.has(t.id) ? await this.store.load(t.id, context) : t
      if (now === undefined) continue
      // a status filter the task no longer meets: it leaves the page
      if (saved.has(t.id) && params.status !== TaskState.TASK_STATE_UNSPECIFIED && now.status?.state !== params.status) continue
      tasks.push(saved.has(t.id) ? listView(now, params) : now)
    }
    return { ...page, tasks }
  }

  /**
   * CancelTask, of the task as its run now stands (one that ended elsewhere is not cancelable). The run is canceled
   * before the SDK's cancelTask: a failure is answered before the SDK attaches its event queue to the task's bus.
   */
  async cancelTask (params: CancelTaskRequest, context: ServerCallContext): Promise<Task> {
    await this.refreshStored(params.id, context)
    return await cancelTask(this.cancelHost, this.canceling, params.id, context, async () => await this.inner.cancelTask(params, context))
  }

  /**
   * SubscribeToTask (the SDK's, with a bound per task and an end when the
   * client goes: streams.ts), of the task as its run now stands: one whose
   * run ended unwatched is refused as ended, not streamed silent for ever.
   */
  async * resubscribe (params: SubscribeToTaskRequest, context: ServerCallContext): AsyncGenerator<StreamResponse, void, undefined> {
    await this.refreshStored(params.id, context)
    yield * this.streams.subscribe(params.id, context)
  }

  async createTaskPushNotificationConfig (params: TaskPushNotificationConfig, context: ServerCallContext): Promise<TaskPushNotificationConfig> {
    return this.inner.createTaskPushNotificationConfig(params, context)
  }

  async getTaskPushNotificationConfig (params: GetTaskPushNotificationConfigRequest, context: ServerCallContext): Promise<TaskPushNotificationConfig> {
    return this.inner.getTaskPushNotificationConfig(params, context)
  }

  async listTaskPushNotificationConfigs (params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext): Promise<ListTaskPushNotificationConfigsResponse> {
    return this.inner.listTaskPushNotificationConfigs(params, context)
  }

  async deleteTaskPushNotificationConfig (params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext): Promise<void> {
    await this.inner.deleteTaskPushNotificationConfig(params, context)
  }

  // ---- mesh calls before the SDK runs the executor ------------------------------------

  /** Delegate (new task) or resume (a task waiting for input); returns what the executor finds by the message's id. */
  private async prepare (params: SendMessageRequest, context: ServerCallContext): Promise<Prepared> {
    const msg = params.message
    if (msg === undefined || msg.messageId === '') throw new RequestMalformedError('SendMessage needs a message with a messageId')
    checkReferences(msg) // before any await, a new task and a resume alike: the SDK loads each reference after this
    // claimed before the first await: two sends of one message at once would otherwise both pass, both reserve a
    // place and both start a run
    if (this.claimed.has(msg.messageId)) throw new RequestMalformedError(`message ${msg.messageId.slice(0, 128)} is already being processed`)
    this.claimed.add(msg.messageId)
    const signal = AbortSignal.any([this.stopping.signal, AbortSignal.timeout(A2A_MESH_CALL_TIMEOUT_MS)])
    try {
      if (msg.taskId !== '') {
        let task = await this.store.load(msg.taskId, context)
        // a task nothing follows may show its run as it was (left unfollowed, its watch gone): one shown working is
        // checked against the run (a read per such message; any other state is answered as the task shows it)
        if (task?.status?.state === TaskState.TASK_STATE_WORKING && await this.refresher.refresh(task, true)) task = await this.store.load(msg.taskId, context)
        if (task === undefined) throw new TaskNotFoundError(`no task ${msg.taskId.slice(0, 128)}`)
        const runId = runIdOf(task)
        if (runId === undefined) throw new TaskNotFoundError(`task ${task.id} names no mesh run`)
        if (task.status?.state !== TaskState.TASK_STATE_INPUT_REQUIRED) {
          throw new UnsupportedOperationError(`task ${task.id} is not waiting for input (a resolution resumes an input-required task)`)
        }
        // the SDK's own check, made again before the mesh call: a message it refuses must not have resumed the run
        if (msg.contextId !== '' && msg.contextId !== task.contextId) {
          throw new RequestMalformedError(`the message's contextId (${msg.contextId.slice(0, 128)}) is not its task's (${task.contextId}): the run is not resumed`)
        }
        const resolution = readResume(msg)
        const claim = this.runs.claim(task.id)
        this.resumes(task.id, 1)
        let run: Run
        try {
          run = await this.node.resume(runId, resolution, { signal, checkpointId: resumeCheckpointOf(msg, task) })
        } catch (err) {
          this.resumes(task.id, -1)
          if (claim !== undefined) await this.runs.release(claim)
          throw err
        }
        const p: Prepared = { messageId: msg.messageId, run, taken: false, resumed: { ids: { taskId: task.id, contextId: task.contextId }, claim } }
        this.prepared.set(msg.messageId, p)
        return p
      } else {
        if (msg.contextId === '') msg.contextId = randomUUID()
        if (!CORRELATION_ID.test(msg.contextId)) throw new RequestMalformedError('contextId (the mesh correlation id) must match ^[A-Za-z0-9._:/-]{1,128}$')
        const { capability, input } = readDelegate(msg, this.meshCard.capabilities)
        // before the mesh call: a task refused here has started no run; one admitted holds its place from here on,
        // so new tasks sent at once cannot together push out an open task
        await this.store.ready
        const reservation = this.store.reserve()
        let run: Run
        try {
          // the contextId is the conversation too: each new task in it is its next turn (protocols/turns.md)
          run = await this.node.delegate({ to_agent: this.meshCard.agent_id, task_id: msg.contextId, context_id: msg.contextId, capability, input }, { signal })
        } catch (err) {
          this.store.unreserve(reservation)
          throw err
        }
        if (this.stopping.signal.aborted) {
          // the server closed while the run started: no task will show it, so it ends
          this.store.unreserve(reservation)
          this.unkeptAtClose++
          await this.endRuns([{ taskId: '', runId: run.run_id }], CLOSED_BEFORE_KEPT)
          throw closedBeforeKept(run)
        }
        const p: Prepared = { messageId: msg.messageId, run, taken: false, reservation }
        this.prepared.set(msg.messageId, p)
        return p
      }
    } catch (err) {
      this.claimed.delete(msg.messageId) // the send is over: the message may be sent again
      throw err instanceof A2AError ? err : toA2aError(err)
    }
  }

  /**
   * The SDK answered. A resume it refused before running the executor (a check of its own) still resumed the run,
   * which the task's watch reads from the run's log (or a new watch); a new task's run it refused so has no task
   * to show it, and ends (close() ends those it caught).
   */
  private settle (p: Prepared): void {
    // only its own entry and claim: each reservation is given back once, by the send that made it
    if (this.prepared.get(p.messageId) === p) {
      this.prepared.delete(p.messageId)
      this.claimed.delete(p.messageId)
    }
    if (p.reservation !== undefined) this.store.unreserve(p.reservation)
    if (p.resumed !== undefined) this.resumes(p.resumed.ids.taskId, -1)
    if (p.taken) return
    if (p.resumed === undefined) {
      if (p.unkept !== true) void this.endRuns([{ taskId: '', runId: p.run.run_id }], REFUSED_BEFORE_KEPT)
      return
    }
    this.log.warn({ run_id: p.run.run_id, task_id: p.resumed.ids.taskId }, 'a2a: a resumed run reached no execution: its task watches it')
    const claim = p.resumed.claim
    const done = claim !== undefined && this.runs.get(claim.ids.taskId) === claim ? this.runs.release(claim) : this.runs.watch(p.run, p.resumed.ids)
    done.catch((err: unknown) => { this.log.warn({ err: (err as Error).message, run_id: p.run.run_id }, 'a2a: cannot watch a resumed run that reached no execution') })
  }

  /** Count an A2A resume of the task in (1) or out (-1). */
  private resumes (taskId: string, by: 1 | -1): void {
    const n = (this.resuming.get(taskId) ?? 0) + by
    if (n > 0) this.resuming.set(taskId, n)
    else this.resuming.delete(taskId)
  }

  // ---- the executor ------------------------------------------------------------------

  private async execute (ctx: RequestContext, bus: ExecutionEventBus): Promise<void> {
    const p = this.prepared.get(ctx.userMessage.messageId)
    if (p === undefined) throw new Error(`no mesh run was prepared for message ${ctx.userMessage.messageId}`)
    p.taken = true
    p.taskId = ctx.taskId
    if (p.reservation !== undefined) this.store.bind(p.reservation, ctx.taskId)
    const ids = { taskId: ctx.taskId, contextId: ctx.contextId }
    const history = [...(ctx.task?.history ?? []), ctx.userMessage]
    const task = { ...runToTask(p.run, ctx.taskId, history), contextId: ctx.contextId }
    bus.publish(Bus.task(task))
    if (p.run.state === 'running') {
      // left unfollowed (its correlation stayed busy here): the task ends its execution showing the run as it is now
      if (!await this.runs.follow(p.run, ids, bus)) await this.refresher.publishCurrent(p.run.run_id, ids, bus)
      return
    }
    // already blocked or over (a quick run): the status ends the SDK's wait (a task event alone does not end it)
    if (task.status !== undefined) bus.publish(Bus.statusUpdate({ ...ids, status: task.status, metadata: task.metadata }))
    if (p.run.state === 'blocked') await this.runs.watch(p.run, ids)
    else this.runs.drop(ctx.taskId)
  }
}
