/**
 * The event buses of one agent's tasks, one per task id. The SDK's manager
 * keys each bus by the caller's scope too, (tenant, owner): a request naming
 * an A2A v1 `tenant` had its task's bus made under that tenant, while the
 * gateway reached the bus where no request is at hand (a watched run's
 * events and their end, a task dropped from the store, a cancel's end:
 * task-runs.ts, agent-handler.ts, task-cancel.ts) under no tenant. So the
 * later moves of such a task's run went to a bus nobody listened to, its
 * subscribers waited for ever, and the bus the SDK kept for it (with their
 * listeners) was never freed.
 *
 * The task store keys tasks by id alone (BoundedTaskStore ignores the
 * request's context: any caller of the agent reads any of its tasks by id),
 * so the buses are keyed the same way: whatever the scope a bus is made,
 * read or cleaned up with, it is the task's one bus. The owner never
 * differed (every caller is the SDK's unauthenticated user, streams.ts).
 */
import { DefaultExecutionEventBusManager, type ExecutionEventBus, type ServerCallContext } from '@a2a-js/sdk/server'

export class TaskBuses extends DefaultExecutionEventBusManager {
  override createOrGetByTaskId (taskId: string, _context?: ServerCallContext): ExecutionEventBus {
    return super.createOrGetByTaskId(taskId)
  }

  override getByTaskId (taskId: string, _context?: ServerCallContext): ExecutionEventBus | undefined {
    return super.getByTaskId(taskId)
  }

  override cleanupByTaskId (taskId: string, _context?: ServerCallContext): void {
    super.cleanupByTaskId(taskId)
  }
}
