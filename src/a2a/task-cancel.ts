/**
 * CancelTask and the SendMessage checks made before any await, for agent-handler.ts.
 *
 * The SDK's cancelTask calls the executor (which cancels the mesh run) only
 * for a task that has a bus; for one with none (a task loaded after a
 * restart) it writes TASK_STATE_CANCELED to the store itself and leaves the
 * run be, blocked or working, and the context locked for its next turn. So
 * an open task with no bus is given one first. And the run is canceled
 * before the SDK's cancelTask, not in the executor: the SDK attaches an event
 * queue to the bus before it calls the executor and stops it only once the
 * executor returned, so a failure thrown there left a queue on the bus.
 */
import type { Message, Task } from '@a2a-js/sdk'
import { AgentEvent as Bus, type DefaultExecutionEventBusManager, type ExecutionEventBus, type ServerCallContext } from '@a2a-js/sdk/server'
import { RequestMalformedError, TaskNotCancelableError, TaskNotFoundError } from '@a2a-js/sdk/errors'
import type { MeshNode } from '../node.ts'
import type { Run } from '../runlog/types.ts'
import { A2A_MESH_CALL_TIMEOUT_MS, A2A_REFERENCE_TASKS_MAX } from './constants.ts'
import { isFinalState, runIdOf, runToTask, toA2aError } from './mapping.ts'
import type { TaskRuns } from './task-runs.ts'
import type { BoundedTaskStore } from './task-store.ts'

export interface CancelHost {
  node: MeshNode
  store: BoundedTaskStore
  runs: TaskRuns
  buses: DefaultExecutionEventBusManager
}

/**
 * Refuse a message naming more than A2A_REFERENCE_TASKS_MAX referenceTaskIds: the SDK would load a copy of the
 * task for each one (repeats included) and keep them while the run is followed, and the mesh reads none of them.
 */
export function checkReferences (msg: Message): void {
  const n = msg.referenceTaskIds?.length ?? 0
  if (n > A2A_REFERENCE_TASKS_MAX) {
    throw new RequestMalformedError(`the message names ${n} referenceTaskIds, more than A2A_REFERENCE_TASKS_MAX (${A2A_REFERENCE_TASKS_MAX})`)
  }
}

/**
 * The SDK's cancelTask of an open task with no bus (loaded after a restart): the bus made for it, so the SDK
 * cancels through the executor (cancelExecution) and the run is canceled; undefined when none was needed.
 */
export async function busForCancel (host: CancelHost, taskId: string, context: ServerCallContext): Promise<ExecutionEventBus | undefined> {
  const task: Task | undefined = await host.store.load(taskId, context)
  if (task === undefined || (task.status !== undefined && isFinalState(task.status.state))) return undefined
  if (host.buses.getByTaskId(taskId, context) !== undefined) return undefined
  return host.buses.createOrGetByTaskId(taskId, context)
}

/**
 * CancelTask's mesh call, made before the SDK's cancelTask: the open task's run canceled (undefined when the task
 * is not there or over, which the SDK answers itself). A failure is thrown here, before the SDK attaches an event
 * queue to the task's bus: thrown from the executor it left that queue on the bus, one more per failed cancel.
 */
export async function cancelRun (host: CancelHost, taskId: string, context: ServerCallContext): Promise<Run | undefined> {
  const task = await host.store.load(taskId, context)
  if (task === undefined || (task.status !== undefined && isFinalState(task.status.state))) return undefined
  // the tracked run first: after a handoff it is the next run already, while the task's metadata names the
  // handed-off one until the next run's first event is saved
  const runId = host.runs.get(taskId)?.runId ?? runIdOf(task)
  if (runId === undefined) throw new TaskNotFoundError(`task ${taskId.slice(0, 128)} names no mesh run`)
  let run: Run
  try {
    run = await host.node.cancel(runId, 'canceled by an A2A client', { signal: AbortSignal.timeout(A2A_MESH_CALL_TIMEOUT_MS) })
  } catch (err) {
    throw toA2aError(err)
  }
  host.runs.drop(taskId)
  return run
}

/**
 * CancelTask: the run canceled first (cancelRun), kept in `canceling` for the executor while the SDK's cancelTask
 * (`sdkCancel`) runs. An open task with no bus (loaded after a restart) gets one, or the SDK would say CANCELED
 * itself; a bus so made and left (the SDK's cancel failed) is cleaned up.
 */
export async function cancelTask (host: CancelHost, canceling: Map<string, Run>, taskId: string, context: ServerCallContext, sdkCancel: () => Promise<Task>): Promise<Task> {
  const run = await cancelRun(host, taskId, context)
  if (run !== undefined) canceling.set(taskId, run)
  let made: ExecutionEventBus | undefined
  try {
    made = await busForCancel(host, taskId, context)
    return await sdkCancel()
  } finally {
    if (run !== undefined && canceling.get(taskId) === run) canceling.delete(taskId)
    // a cancel that failed leaves no bus behind for a task no execution holds
    if (made !== undefined && host.buses.getByTaskId(taskId, context) === made) host.buses.cleanupByTaskId(taskId, context)
  }
}

/**
 * The executor's cancelTask: say CANCELED on the task's bus at once, of the run cancelRun canceled (the SDK waits
 * on that bus for the final state; the run's own run.failed event is then not published again). A cancel that
 * reached the executor with no run canceled for it (a task it found open that cancelRun did not) cancels the run
 * here.
 */
export async function cancelExecution (host: CancelHost, taskId: string, bus: ExecutionEventBus, canceled: Run | undefined): Promise<void> {
  const context = { tenant: '' } as unknown as ServerCallContext
  const task = await host.store.load(taskId, context)
  if (task === undefined) throw new TaskNotFoundError(`no task ${taskId.slice(0, 128)}`)
  const run = canceled ?? await cancelRun(host, taskId, context)
  if (run === undefined) throw new TaskNotCancelableError(`task ${taskId} is over`)
  const t = runToTask(run, taskId)
  bus.publish(Bus.statusUpdate({ taskId, contextId: task.contextId, status: t.status, metadata: t.metadata }))
  bus.finished()
  host.buses.cleanupByTaskId(taskId)
}
