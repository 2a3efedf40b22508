/**
 * A refresh of an unwatched task (task-refresh.ts) reads the run for up to
 * A2A_TASK_REFRESH_TIMEOUT_MS; meanwhile the task may be evicted, or end by
 * other means. What was read is then older than the task: it is not saved,
 * and no bus is made for a task the store no longer holds, or holds ended.
 * The node is a stand-in with a gated getRun (the refresher's only use of
 * it), so the read can be held open at will.
 */
import { describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import type { Task } from '@a2a-js/sdk'
import { DefaultExecutionEventBusManager } from '@a2a-js/sdk/server'
import { silentLogger } from '../src/logger.ts'
import { TaskRefresher } from '../src/a2a/task-refresh.ts'
import { BoundedTaskStore } from '../src/a2a/task-store.ts'
import { A2A_MESH_EXTENSION_URI } from '../src/a2a/constants.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'

function task (id: string, runId: string): Task {
  return {
    id, contextId: `ctx-${id}`, artifacts: [], history: [],
    status: { state: TaskState.TASK_STATE_INPUT_REQUIRED, message: undefined, timestamp: new Date(0).toISOString() },
    metadata: { [A2A_MESH_EXTENSION_URI]: { run_id: runId, correlation_id: `ctx-${id}` } }
  }
}

describe('a refresh that read its run while the task went or ended', () => {
  it('a refresh that finishes after its task was evicted leaves no bus behind', async () => {
    const buses = new DefaultExecutionEventBusManager()
    let refresher: TaskRefresher | undefined
    const store = new BoundedTaskStore(1, (taskId) => { refresher?.forget(taskId); buses.cleanupByTaskId(taskId) })
    const gate = Promise.withResolvers<void>()
    const run = {
      run_id: 'ag:r1', correlation_id: 'ctx-t1', state: 'running', handoff_to: null, checkpoint_id: null, block_reason: null,
      failure: null, output: null, last_seq: 3, updated_at: new Date().toISOString()
    } as unknown as Run
    const node = { getRun: async () => { await gate.promise; return run } } as unknown as MeshNode
    refresher = new TaskRefresher({ node, log: silentLogger(), store, buses, stopping: new AbortController().signal, followed: () => false })
    const ctx = {} as never
    await store.save(task('t1', 'ag:r1'), ctx)
    const t1 = await store.load('t1', ctx) as Task
    const pending = refresher.refresh(t1)
    // a new task evicts t1 while its run is being read
    await store.save(task('t2', 'ag:r2'), ctx)
    expect(await store.load('t1', ctx)).toBeUndefined()
    gate.resolve()
    expect(await pending).toBe(false)
    expect(buses.getByTaskId('t1')).toBeUndefined()
    expect(refresher.stats).toMatchObject({ updated: 0, raced: 1 })
  })

  it('a refresh read before the task ended elsewhere saves nor publishes its older state', async () => {
    const buses = new DefaultExecutionEventBusManager()
    const store = new BoundedTaskStore(10)
    const gate = Promise.withResolvers<void>()
    const older = {
      run_id: 'ag:r3', correlation_id: 'ctx-t3', state: 'blocked', handoff_to: null, checkpoint_id: 'cp-B', block_reason: 'b', failure: null,
      output: null, last_seq: 4, updated_at: new Date().toISOString()
    } as unknown as Run
    const node = { getRun: async () => { await gate.promise; return older } } as unknown as MeshNode
    const refresher = new TaskRefresher({ node, log: silentLogger(), store, buses, stopping: new AbortController().signal, followed: () => false })
    const ctx = {} as never
    await store.save(task('t3', 'ag:r3'), ctx)
    const pending = refresher.refresh(await store.load('t3', ctx) as Task)
    // meanwhile an A2A resume's execution completed the task (and cleaned its bus up)
    const done = task('t3', 'ag:r3')
    done.status = { state: TaskState.TASK_STATE_COMPLETED, message: undefined, timestamp: new Date().toISOString() }
    await store.save(done, ctx)
    gate.resolve()
    expect(await pending).toBe(false)
    expect((await store.load('t3', ctx))?.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(buses.getByTaskId('t3')).toBeUndefined()
    expect(refresher.stats).toMatchObject({ updated: 0, raced: 1 })
  })
})
