/**
 * A CancelTask whose mesh cancel fails leaves nothing on the task's bus.
 * The SDK's cancelTask attaches an event queue (two listeners) to the
 * task's bus and then calls the executor; an executor that threw (the mesh
 * cancel failed: the run's executor node is gone) left the queue on the bus,
 * never stopped, so each failed CancelTask added one more listener and its
 * buffer (Node warned MaxListenersExceededWarning past 10). The mesh cancel
 * is now made before the SDK's, so a failure is answered before any queue.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import type { ExecutionEventBus } from '@a2a-js/sdk/server'
import type { TaskBuses } from '../src/a2a/task-buses.ts'
import { startA2aMesh, stopA2aMesh, APPROVE, type A2aMesh } from './fixtures/a2a-mesh.ts'
import { asTask, handlerOf, send } from './fixtures/a2a-messages.ts'

const CANCELS = 12

/** Listeners on a bus of the SDK's (its fields, not in its types). */
function listeners (bus: ExecutionEventBus | undefined): { event: number, finished: number } {
  const b = bus as unknown as { eventListeners: Map<unknown, unknown>, finishedListeners: Map<unknown, unknown> }
  return { event: b.eventListeners.size, finished: b.finishedListeners.size }
}

describe('A2A inbound: a failed CancelTask', () => {
  let m: A2aMesh | undefined
  afterAll(async () => { await stopA2aMesh(m) })

  it('leaves the task\'s bus with the listeners it had', async () => {
    m = await startA2aMesh()
    const { client, a2a, worker } = m
    const task = asTask(await client.sendMessage(send(APPROVE, {}, 'ctx-cancel-failed-listeners')))
    expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const handler = await handlerOf(a2a, worker.agentId)
    const buses = (handler as unknown as { buses: TaskBuses }).buses
    const bus = buses.getByTaskId(task.id)
    expect(bus).toBeDefined()
    const before = listeners(bus)

    // the run's executor node goes: the mesh cancel fails
    await worker.stop()
    let failed = 0
    for (let i = 0; i < CANCELS; i++) {
      await client.cancelTask({ tenant: '', id: task.id, metadata: undefined }).then(
        () => { throw new Error('a cancel of a run whose executor is gone succeeded') },
        () => { failed++ }
      )
    }
    expect(failed).toBe(CANCELS)
    expect(buses.getByTaskId(task.id)).toBe(bus)
    // none added (the execution that waits on the run's watch may have let its own go as the worker went)
    const after = listeners(bus)
    expect(after.event).toBeLessThanOrEqual(before.event)
    expect(after.finished).toBeLessThanOrEqual(before.finished)
    // the task still waits for input: a failed cancel changed nothing
    expect((await client.getTask({ tenant: '', id: task.id })).status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
  })
})
