/**
 * A2A tasks waiting for input whose watches went (past the server's bound)
 * come up to date when a client reads them: GetTask and ListTasks, over
 * HTTP with the official @a2a-js/sdk client, read the run again and show a
 * cancel by the delegator, or a resume through the node's API and the run's
 * output, or a new checkpoint; SubscribeToTask and CancelTask see it so too. Reads are bounded per task, and one that
 * fails leaves the task as it was.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import type { Task } from '@a2a-js/sdk'
import type { Client } from '@a2a-js/sdk/client'
import type { MeshNode } from '../src/node.ts'
import { A2aServer } from '../src/a2a/server.ts'
import type { MeshAgentHandler } from '../src/a2a/agent-handler.ts'
import { A2A_TASK_REFRESH_INTERVAL_MS, PART_CHECKPOINT, PART_FAILURE, PART_OUTPUT, PART_RESUME } from '../src/a2a/constants.ts'
import { until } from './helpers.ts'
import { APPROVE, blocksTwice, startA2aMesh, stopA2aMesh, type A2aMesh } from './fixtures/a2a-mesh.ts'
import { asTask, data, handlerOf, partData, runIdOf, send, userMessage } from './fixtures/a2a-messages.ts'

/** Asks twice: the second checkpoint is a new one. */
const TWICE = { capability_id: 'cap:approve-twice', version: '1.0.0' }

describe('A2A inbound: a task whose watch went is read again', () => {
  let m: A2aMesh | undefined
  let worker: MeshNode, gateway: MeshNode
  let a2a: A2aServer
  let client: Client
  let handler: MeshAgentHandler

  beforeAll(async () => {
    m = await startA2aMesh({
      more: [[TWICE, blocksTwice]],
      // one watch for the whole server: each new task waiting for input drops the previous one's
      server: { maxInputWatches: 1 }
    })
    ;({ worker, gateway, a2a, client } = m)
  })
  afterAll(async () => { await stopA2aMesh(m) })

  /** A task waiting for input, and the newer one that took its watch. */
  async function dropped (cap: typeof APPROVE, contextId: string): Promise<{ task: Task, newer: Task }> {
    const task = asTask(await client.sendMessage(send(cap, { order: contextId }, contextId)))
    expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    handler = await handlerOf(a2a, worker.agentId)
    const before = handler.runs.stats.watchesDropped
    const newer = asTask(await client.sendMessage(send(APPROVE, { order: `${contextId}-newer` }, `${contextId}-newer`)))
    expect(newer.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    expect(handler.runs.stats.watchesDropped).toBe(before + 1)
    expect(handler.runs.get(task.id)).toBeUndefined()
    return { task, newer }
  }

  /** Cancel the watched task's run and wait for its watch to go, so the next test's tasks start with no watch held. */
  async function release (newer: Task): Promise<void> {
    await gateway.cancel(runIdOf(newer), 'cleanup')
    await until(() => handler.runs.get(newer.id) === undefined, 'the watch of the canceled task to go')
  }

  it('a blocked run canceled by the delegator after its watch went: GetTask shows the task CANCELED', async () => {
    const { task, newer } = await dropped(APPROVE, 'corr-refresh-cancel')
    await gateway.cancel(runIdOf(task), 'the delegator changed its mind')
    const reads = handler.refresher.stats.reads
    const got = await client.getTask({ tenant: '', id: task.id })
    expect(got.status?.state).toBe(TaskState.TASK_STATE_CANCELED)
    expect(partData(got.status?.message?.parts, PART_FAILURE)?.code).toBe('CANCELED')
    expect(handler.refresher.stats.reads).toBe(reads + 1)
    // saved: a later read is served from the store, and the run is not read again
    expect((await client.getTask({ tenant: '', id: task.id })).status?.state).toBe(TaskState.TASK_STATE_CANCELED)
    expect(handler.refresher.stats.reads).toBe(reads + 1)
    await release(newer)
  })

  it('a blocked run resumed through the node\'s API after its watch went: GetTask shows the output and COMPLETED', async () => {
    const { task, newer } = await dropped(APPROVE, 'corr-refresh-resume')
    await gateway.resume(runIdOf(task), { approved: true })
    await until(async () => (await gateway.getRun(runIdOf(task))).state === 'completed', 'the resumed run to complete')
    const got = await client.getTask({ tenant: '', id: task.id })
    expect(got.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(got.artifacts).toHaveLength(1)
    expect(partData(got.artifacts[0]?.parts, PART_OUTPUT)?.output).toEqual({ approved: true, input: { order: 'corr-refresh-resume' } })
    await release(newer)
  })

  it('a run resumed outside A2A that blocks again shows its new checkpoint, and an A2A resume of it completes the task', async () => {
    const { task, newer } = await dropped(TWICE, 'corr-refresh-again')
    await gateway.resume(runIdOf(task), { look: 1 })
    await until(async () => (await gateway.getRun(runIdOf(task))).checkpoint_id === 'cp2-corr-refresh-again', 'the run to block again')
    const got = await client.getTask({ tenant: '', id: task.id })
    expect(got.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    expect(partData(got.status?.message?.parts, PART_CHECKPOINT)).toMatchObject({ checkpoint_id: 'cp2-corr-refresh-again', reason: 'second look' })
    const resume = { tenant: '', message: userMessage([data(PART_RESUME, { resolution: { look: 2 } })], { taskId: task.id, contextId: task.contextId }), configuration: undefined, metadata: undefined }
    const done = asTask(await client.sendMessage(resume))
    expect(done.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(partData(done.artifacts[0]?.parts, PART_OUTPUT)?.output).toEqual({ first: { look: 1 }, second: { look: 2 } })
    await release(newer)
  })

  it('SubscribeToTask and CancelTask see the task as its run now stands: ended, not waiting silent', async () => {
    const { task, newer } = await dropped(APPROVE, 'corr-refresh-subscribe')
    await gateway.cancel(runIdOf(task), 'canceled while unwatched')
    const ac = new AbortController()
    try {
      const stream = client.resubscribeTask({ tenant: '', id: task.id }, { signal: ac.signal })
      await expect(stream.next()).rejects.toThrow(/has ended/)
    } finally {
      ac.abort()
    }
    expect((await client.getTask({ tenant: '', id: task.id })).status?.state).toBe(TaskState.TASK_STATE_CANCELED)
    // canceled already, as it now shows: the answer is the task, not the mesh's refusal to cancel an ended run
    expect((await client.cancelTask({ tenant: '', id: task.id, metadata: undefined })).status?.state).toBe(TaskState.TASK_STATE_CANCELED)
    await release(newer)
  })

  it('ListTasks shows the tasks whose watches went as their runs now stand', async () => {
    const { task, newer } = await dropped(APPROVE, 'corr-refresh-list')
    await gateway.cancel(runIdOf(task), 'canceled while unwatched')
    const page = await client.listTasks({ tenant: '', contextId: task.contextId, status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 10, pageToken: '', historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: false })
    expect(page.tasks.map(t => [t.id, t.status?.state])).toEqual([[task.id, TaskState.TASK_STATE_CANCELED]])
    // the watched task is not read: its watch keeps it
    const reads = handler.refresher.stats.reads
    const watched = await client.listTasks({ tenant: '', contextId: newer.contextId, status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 10, pageToken: '', historyLength: undefined, statusTimestampAfter: undefined, includeArtifacts: false })
    expect(watched.tasks.map(t => t.status?.state)).toEqual([TaskState.TASK_STATE_INPUT_REQUIRED])
    expect(handler.refresher.stats.reads).toBe(reads)
    await release(newer)
  })

  it('a task still blocked is read at most once per interval; a read that fails leaves the task as it was', async () => {
    const { task, newer } = await dropped(APPROVE, 'corr-refresh-bounds')
    const reads = handler.refresher.stats.reads
    const from = Date.now()
    for (let i = 0; i < 3; i++) expect((await client.getTask({ tenant: '', id: task.id })).status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    // one read for the three, or one per interval if a busy machine spread them past one
    const made = handler.refresher.stats.reads - reads
    expect(made).toBeGreaterThanOrEqual(1)
    expect(made).toBeLessThanOrEqual(1 + Math.floor((Date.now() - from) / A2A_TASK_REFRESH_INTERVAL_MS))
    // the executor goes: the next read fails, and the client still gets the task as saved
    await worker.stop()
    await until(async () => {
      await client.getTask({ tenant: '', id: task.id })
      return handler.refresher.stats.readErrors > 0
    }, 'a read of the run to fail')
    const got = await client.getTask({ tenant: '', id: task.id })
    expect(got.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    expect(partData(got.status?.message?.parts, PART_CHECKPOINT)?.checkpoint_id).toBe('cp-corr-refresh-bounds')
    expect(handler.runs.get(newer.id)?.waiting).toBe(true)
  })
})
