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
 */
import { randomUUID } from 'node:crypto'
import type {
  AgentCard as A2aCard, CancelTaskRequest, DeleteTaskPushNotificationConfigRequest, GetExtendedAgentCardRequest,
  GetTaskPushNotificationConfigRequest, GetTaskRequest, ListTaskPushNotificationConfigsRequest, ListTaskPushNotificationConfigsResponse,
  ListTasksRequest, ListTasksResponse, Message, SendMessageRequest, StreamResponse, SubscribeToTaskRequest, Task, TaskPushNotificationConfig
} from '@a2a-js/sdk'
import { TaskState } from '@a2a-js/sdk'
import {
  AgentEvent as Bus, DefaultExecutionEventBusManager, DefaultRequestHandler, type A2ARequestHandler, type AgentExecutor,
  type ExecutionEventBus, type RequestContext, type ServerCallContext
} from '@a2a-js/sdk/server'
import { A2AError, RequestMalformedError, TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError } from '@a2a-js/sdk/errors'
import type { AgentCard as MeshCard } from '../card/card.ts'
import type { Logger } from '../logger.ts'
import type { MeshNode } from '../node.ts'
import type { AgentEvent, Run } from '../runlog/types.ts'
import type { EventSubscription } from '../events/subscription.ts'
import { A2A_MESH_CALL_TIMEOUT_MS, A2A_TASKS_MAX_PER_AGENT } from './constants.ts'
import { eventToUpdates, isFinalState, readDelegate, readResume, runIdOf, runToTask, toA2aError } from './mapping.ts'
import { BoundedTaskStore } from './task-store.ts'

/** contextId doubles as the mesh correlation id (a TaskId). */
const CORRELATION_ID = /^[A-Za-z0-9._:/-]{1,128}$/

/** The mesh call made for a SendMessage, waiting for the executor the SDK then calls. */
interface Prepared { run: Run }

/** A task whose run this handler follows. */
interface Followed {
  runId: string
  /** Set once the task reached a final state here: later events of the run are not published. */
  finished: boolean
  sub?: EventSubscription
  /** Ends the follower's wait (the run blocked or ended, the task was canceled or evicted, the node stops). */
  stop?: () => void
}

export class MeshAgentHandler implements A2ARequestHandler {
  private _card: A2aCard
  readonly store: BoundedTaskStore
  private meshCard: MeshCard
  private readonly node: MeshNode
  private readonly log: Logger
  private readonly inner: DefaultRequestHandler
  private readonly buses = new DefaultExecutionEventBusManager()
  private readonly prepared = new Map<string, Prepared>()
  private readonly followed = new Map<string, Followed>()
  private readonly stopping = new AbortController()

  constructor (node: MeshNode, meshCard: MeshCard, card: A2aCard, log: Logger) {
    this.node = node
    this.meshCard = meshCard
    this._card = card
    this.log = log
    // a task dropped from the store takes what is kept for it here and in the SDK's bus manager (which keeps
    // the bus of an input-required task until a follow-up or a cancel that may never come)
    this.store = new BoundedTaskStore(A2A_TASKS_MAX_PER_AGENT, (taskId) => {
      const f = this.followed.get(taskId)
      if (f !== undefined) this.finish(taskId, f)
      this.buses.cleanupByTaskId(taskId)
    })
    const executor: AgentExecutor = {
      execute: async (ctx, bus) => { await this.execute(ctx, bus) },
      cancelTask: async (taskId, bus) => { await this.cancelExecution(taskId, bus) }
    }
    this.inner = new DefaultRequestHandler(card, this.store, executor, this.buses)
  }

  /** Tasks whose runs this handler follows now. */
  get following (): number {
    return this.followed.size
  }

  /** SendMessage requests in progress (from the mesh call before the task exists to the SDK's answer). */
  get sending (): number {
    return this.inFlight
  }

  private inFlight = 0

  /** Stop following runs (the tasks keep their last state). */
  close (): void {
    this.stopping.abort()
    for (const f of this.followed.values()) f.sub?.close()
    this.followed.clear()
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
      const key = await this.prepare(params, context)
      try {
        return await this.inner.sendMessage(params, context)
      } finally {
        this.prepared.delete(key)
      }
    } finally {
      this.inFlight--
    }
  }

  async * sendMessageStream (params: SendMessageRequest, context: ServerCallContext): AsyncGenerator<StreamResponse, void, undefined> {
    this.inFlight++
    try {
      const key = await this.prepare(params, context)
      try {
        yield * this.inner.sendMessageStream(params, context)
      } finally {
        this.prepared.delete(key)
      }
    } finally {
      this.inFlight--
    }
  }

  async getTask (params: GetTaskRequest, context: ServerCallContext): Promise<Task> {
    return this.inner.getTask(params, context)
  }

  async listTasks (params: ListTasksRequest, context: ServerCallContext): Promise<ListTasksResponse> {
    return this.inner.listTasks(params, context)
  }

  async cancelTask (params: CancelTaskRequest, context: ServerCallContext): Promise<Task> {
    return this.inner.cancelTask(params, context)
  }

  async * resubscribe (params: SubscribeToTaskRequest, context: ServerCallContext): AsyncGenerator<StreamResponse, void, undefined> {
    yield * this.inner.resubscribe(params, context)
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

  /** Delegate (new task) or resume (a task waiting for input); returns the key the executor finds it by. */
  private async prepare (params: SendMessageRequest, context: ServerCallContext): Promise<string> {
    const msg = params.message
    if (msg === undefined || msg.messageId === '') throw new RequestMalformedError('SendMessage needs a message with a messageId')
    if (this.prepared.has(msg.messageId)) throw new RequestMalformedError(`message ${msg.messageId} is already being processed`)
    const signal = AbortSignal.any([this.stopping.signal, AbortSignal.timeout(A2A_MESH_CALL_TIMEOUT_MS)])
    try {
      if (msg.taskId !== '') {
        const task = await this.store.load(msg.taskId, context)
        if (task === undefined) throw new TaskNotFoundError(`no task ${msg.taskId.slice(0, 128)}`)
        const runId = runIdOf(task)
        if (runId === undefined) throw new TaskNotFoundError(`task ${task.id} names no mesh run`)
        if (task.status?.state !== TaskState.TASK_STATE_INPUT_REQUIRED) {
          throw new UnsupportedOperationError(`task ${task.id} is not waiting for input (a resolution resumes an input-required task)`)
        }
        const run = await this.node.resume(runId, readResume(msg), { signal })
        this.prepared.set(msg.messageId, { run })
      } else {
        if (msg.contextId === '') msg.contextId = randomUUID()
        if (!CORRELATION_ID.test(msg.contextId)) throw new RequestMalformedError('contextId (the mesh correlation id) must match ^[A-Za-z0-9._:/-]{1,128}$')
        const { capability, input } = readDelegate(msg, this.meshCard.capabilities)
        // the contextId is the conversation too: each new task in it is its next turn (protocols/turns.md)
        const run = await this.node.delegate({ to_agent: this.meshCard.agent_id, task_id: msg.contextId, context_id: msg.contextId, capability, input }, { signal })
        this.prepared.set(msg.messageId, { run })
      }
    } catch (err) {
      throw err instanceof A2AError ? err : toA2aError(err)
    }
    return msg.messageId
  }

  // ---- the executor ------------------------------------------------------------------

  private async execute (ctx: RequestContext, bus: ExecutionEventBus): Promise<void> {
    const p = this.prepared.get(ctx.userMessage.messageId)
    if (p === undefined) throw new Error(`no mesh run was prepared for message ${ctx.userMessage.messageId}`)
    const ids = { taskId: ctx.taskId, contextId: ctx.contextId }
    const history = [...(ctx.task?.history ?? []), ctx.userMessage]
    bus.publish(Bus.task({ ...runToTask(p.run, ctx.taskId, history), contextId: ctx.contextId }))
    this.followed.get(ctx.taskId)?.sub?.close()
    if (p.run.state !== 'running') {
      // already blocked or over (a quick run): the task above says so, and nothing is followed; a resume starts a new follower
      this.followed.delete(ctx.taskId)
      return
    }
    const f: Followed = { runId: p.run.run_id, finished: false }
    this.followed.set(ctx.taskId, f)
    await this.follow(p.run, f, ids, bus)
  }

  /** Publish the run's events (after the handle's) until it blocks or ends; follow handoffs to the next run. */
  private async follow (run: Run, f: Followed, ids: { taskId: string, contextId: string }, bus: ExecutionEventBus): Promise<void> {
    const done = Promise.withResolvers<void>()
    f.stop = () => { done.resolve() }
    let seen = run.last_seq
    const onEvent = (e: AgentEvent): void => {
      if (f.finished || e.run_id !== f.runId || e.seq <= seen) return
      seen = e.seq
      for (const u of eventToUpdates(e, ids)) {
        bus.publish(u.kind === 'statusUpdate' ? Bus.statusUpdate(u.data) : Bus.artifactUpdate(u.data))
      }
      const link = e.payload.handoff_to as { run_id?: unknown } | undefined
      if (e.type === 'run.completed' && typeof link?.run_id === 'string') {
        f.runId = link.run_id
        seen = 0
        return
      }
      if (e.type === 'run.blocked') done.resolve()
      if (e.type === 'run.completed' || e.type === 'run.failed') {
        this.finish(ids.taskId, f)
        done.resolve()
      }
    }
    try {
      f.sub = await this.node.events.subscribe(run.correlation_id, {
        runs: [run.run_id],
        onEvent,
        signal: this.stopping.signal
      })
    } catch (err) {
      this.log.warn({ err: (err as Error).message, run_id: run.run_id }, 'a2a: cannot follow the run\'s events')
      // the task fails with this error: its run is canceled, so no work goes on whose end no client would see
      f.finished = true
      if (this.followed.get(ids.taskId) === f) this.followed.delete(ids.taskId)
      await this.node.cancel(run.run_id, 'the A2A server could not follow the run', { signal: AbortSignal.timeout(A2A_MESH_CALL_TIMEOUT_MS) }).catch((cancelErr: unknown) => {
        this.log.warn({ err: (cancelErr as Error).message, run_id: run.run_id }, 'a2a: a run it could not follow could not be canceled either')
      })
      throw err
    }
    const onClose = (): void => { done.resolve() }
    this.stopping.signal.addEventListener('abort', onClose, { once: true })
    // finished (canceled, evicted) or stopping while the subscription started: nothing more to wait for
    if (f.finished || this.stopping.signal.aborted || f.sub.closed) done.resolve()
    try {
      await done.promise
    } finally {
      this.stopping.signal.removeEventListener('abort', onClose)
      // blocked or over: a resume starts a new follower (an input-required task abandoned by its
      // client had kept its entry, and through it its closed subscription, for the node's life)
      f.sub?.close()
      if (this.followed.get(ids.taskId) === f) this.followed.delete(ids.taskId)
    }
  }

  private finish (taskId: string, f: Followed): void {
    f.finished = true
    f.sub?.close()
    f.stop?.()
    if (this.followed.get(taskId) === f) this.followed.delete(taskId)
  }

  /**
   * CancelTask: cancel the run, then say CANCELED on the task's bus at once
   * (the SDK waits on that bus for the final state; the run's own run.failed
   * event is then not published again).
   */
  private async cancelExecution (taskId: string, bus: ExecutionEventBus): Promise<void> {
    const task = await this.store.load(taskId, { tenant: '' } as unknown as ServerCallContext)
    const runId = runIdOf(task) ?? this.followed.get(taskId)?.runId
    if (task === undefined || runId === undefined) throw new TaskNotFoundError(`no task ${taskId.slice(0, 128)}`)
    if (task.status !== undefined && isFinalState(task.status.state)) throw new TaskNotCancelableError(`task ${taskId} is over`)
    let run: Run
    try {
      run = await this.node.cancel(runId, 'canceled by an A2A client', { signal: AbortSignal.timeout(A2A_MESH_CALL_TIMEOUT_MS) })
    } catch (err) {
      throw toA2aError(err)
    }
    const f = this.followed.get(taskId)
    if (f !== undefined) this.finish(taskId, f)
    const t = runToTask(run, taskId)
    bus.publish(Bus.statusUpdate({ taskId, contextId: task.contextId, status: t.status, metadata: t.metadata }))
    bus.finished()
    this.buses.cleanupByTaskId(taskId)
  }
}
