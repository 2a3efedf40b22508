/**
 * CancelTask and the SendMessage checks made before any await, for agent-handler.ts.
 *
 * The SDK's cancelTask calls the executor (which cancels the mesh run) only
 * for a task that has a bus; for one with none (a task loaded after a
 * restart) it writes TASK_STATE_CANCELED to the store itself and leaves the
 * run be, blocked or working, and the context locked for its next turn. So
 * an open task with no bus is given one first.
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
 * The executor's cancelTask: cancel the run, then say CANCELED on the task's
 * bus at once (the SDK waits on that bus for the final state; the run's own
 * run.failed event is then not published again).
 */
export async function cancelExecution (host: CancelHost, taskId: string, bus: ExecutionEventBus): Promise<void> {
  const task = await host.store.load(taskId, { tenant: '' } as unknown as ServerCallContext)
  // the tracked run first: after a handoff it is the next run already, while the task's metadata names the
  // handed-off one until the next run's first event is saved
  const runId = host.runs.get(taskId)?.runId ?? runIdOf(task)
  if (task === undefined || runId === undefined) throw new TaskNotFoundError(`no task ${taskId.slice(0, 128)}`)
  if (task.status !== undefined && isFinalState(task.status.state)) throw new TaskNotCancelableError(`task ${taskId} is over`)
  let run: Run
  try {
    run = await host.node.cancel(runId, 'canceled by an A2A client', { signal: AbortSignal.timeout(A2A_MESH_CALL_TIMEOUT_MS) })
  } catch (err) {
    throw toA2aError(err)
  }
  host.runs.drop(taskId)
  const t = runToTask(run, taskId)
  bus.publish(Bus.statusUpdate({ taskId, contextId: task.contextId, status: t.status, metadata: t.metadata }))
  bus.finished()
  host.buses.cleanupByTaskId(taskId)
}
