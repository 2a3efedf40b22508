/**
 * The A2A gateway's resumes name the checkpoint they answer: an A2A message
 * on an input-required task answers the checkpoint its `aap.resume.request`
 * part names, else the one the task showed it waiting on. A run resumed from
 * outside A2A that blocked on a new checkpoint meanwhile is then not resolved
 * with the answer to the old one: the message is refused (INVALID_TRANSITION)
 * and the run stays blocked on the new checkpoint. Real nodes; the official
 * @a2a-js/sdk client over HTTP.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import type { Task } from '@a2a-js/sdk'
import type { Client } from '@a2a-js/sdk/client'
import type { MeshNode } from '../src/node.ts'
import type { A2aServer } from '../src/a2a/server.ts'
import { PART_CHECKPOINT, PART_OUTPUT, PART_RESUME } from '../src/a2a/constants.ts'
import { until } from './helpers.ts'
import { APPROVE, blocksTwice, startA2aMesh, stopA2aMesh, type A2aMesh } from './fixtures/a2a-mesh.ts'
import { asTask, data, handlerOf, partData, runIdOf, send, userMessage } from './fixtures/a2a-messages.ts'

/** Asks twice: the second checkpoint is a new one. */
const TWICE = { capability_id: 'cap:a2a-resume-twice', version: '1.0.0' }

describe('A2A: a resume message answers the checkpoint it was meant for', () => {
  let m: A2aMesh | undefined
  let worker: MeshNode, gateway: MeshNode
  let a2a: A2aServer
  let client: Client

  beforeAll(async () => {
    m = await startA2aMesh({
      more: [[TWICE, blocksTwice]],
      // one watch for the whole server: a second task waiting for input drops the first one's, so the first
      // task's record shows its first checkpoint until a client reads it again
      server: { maxInputWatches: 1 }
    })
    ;({ worker, gateway, a2a, client } = m)
  })
  afterAll(async () => { await stopA2aMesh(m) })

  const resumeRequest = (task: Task, part: Record<string, unknown>): Parameters<Client['sendMessage']>[0] =>
    ({ tenant: '', message: userMessage([data(PART_RESUME, part)], { taskId: task.id, contextId: task.contextId }), configuration: undefined, metadata: undefined })

  async function blockedOn (runId: string, checkpoint: string): Promise<void> {
    await until(async () => {
      const run = await worker.runs.getRun(runId)
      return run.state === 'blocked' && run.checkpoint_id === checkpoint
    }, `run ${runId} blocked on ${checkpoint}`)
  }

  /** A TWICE task waiting on its first checkpoint, resumed from outside A2A so its run now waits on the second. */
  async function resumedOutside (contextId: string, meanwhile?: (task: Task) => Promise<void>): Promise<{ task: Task, runId: string, seq: number }> {
    const task = asTask(await client.sendMessage(send(TWICE, { order: contextId }, contextId)))
    expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    expect(partData(task.status?.message?.parts, PART_CHECKPOINT)?.checkpoint_id).toBe(`cp1-${contextId}`)
    await meanwhile?.(task)
    const runId = runIdOf(task)
    await gateway.resume(runId, { look: 'outside' }, { checkpointId: `cp1-${contextId}` })
    await blockedOn(runId, `cp2-${contextId}`)
    return { task, runId, seq: (await worker.runs.getRun(runId)).last_seq }
  }

  it('a message naming the first checkpoint is refused once the run waits on the second', async () => {
    const { task, runId, seq } = await resumedOutside('corr-a2a-cp-named')
    await expect(client.sendMessage(resumeRequest(task, { resolution: { look: 'late' }, checkpoint_id: 'cp1-corr-a2a-cp-named' })))
      .rejects.toThrow(/blocked on checkpoint cp2-corr-a2a-cp-named.*INVALID_TRANSITION/)
    expect(await worker.runs.getRun(runId)).toMatchObject({ state: 'blocked', checkpoint_id: 'cp2-corr-a2a-cp-named', last_seq: seq })
    // the answer to the second checkpoint, named so, completes the task
    const done = asTask(await client.sendMessage(resumeRequest(task, { resolution: { look: 2 }, checkpoint_id: 'cp2-corr-a2a-cp-named' })))
    expect(done.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(partData(done.artifacts[0]?.parts, PART_OUTPUT)?.output).toEqual({ first: { look: 'outside' }, second: { look: 2 } })
  })

  it('a message that names none answers the checkpoint its task showed: refused while the task still shows the first', async () => {
    let newer: Task | undefined
    const { task, runId, seq } = await resumedOutside('corr-a2a-cp-shown', async (first) => {
      // before the resume from outside, a newer task takes the only watch: the first task's record goes on showing cp1
      newer = asTask(await client.sendMessage(send(APPROVE, { order: 'newer' }, 'corr-a2a-cp-newer')))
      expect(newer.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
      const handler = await handlerOf(a2a, worker.agentId)
      await until(() => handler.runs.get(first.id) === undefined, 'the first task\'s watch to go')
    })
    await expect(client.sendMessage(resumeRequest(task, { resolution: { look: 'meant for cp1' } })))
      .rejects.toThrow(/blocked on checkpoint cp2-corr-a2a-cp-shown.*INVALID_TRANSITION/)
    expect(await worker.runs.getRun(runId)).toMatchObject({ state: 'blocked', checkpoint_id: 'cp2-corr-a2a-cp-shown', last_seq: seq })
    // read again, the task shows the second checkpoint, and an answer to it completes the task
    const read = await client.getTask({ tenant: '', id: task.id })
    expect(partData(read.status?.message?.parts, PART_CHECKPOINT)?.checkpoint_id).toBe('cp2-corr-a2a-cp-shown')
    const done = asTask(await client.sendMessage(resumeRequest(task, { resolution: { look: 2 } })))
    expect(done.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(partData(done.artifacts[0]?.parts, PART_OUTPUT)?.output).toEqual({ first: { look: 'outside' }, second: { look: 2 } })
    if (newer !== undefined) await gateway.cancel(runIdOf(newer), 'cleanup')
  })

  it('a checkpoint_id that is no checkpoint id is refused as malformed, and the run is not resumed', async () => {
    const task = asTask(await client.sendMessage(send(TWICE, { order: 'bad' }, 'corr-a2a-cp-bad')))
    const runId = runIdOf(task)
    const seq = (await worker.runs.getRun(runId)).last_seq
    await expect(client.sendMessage(resumeRequest(task, { resolution: { look: 1 }, checkpoint_id: 7 }))).rejects.toThrow(/checkpoint_id/)
    expect(await worker.runs.getRun(runId)).toMatchObject({ state: 'blocked', checkpoint_id: 'cp1-corr-a2a-cp-bad', last_seq: seq })
    await gateway.cancel(runId, 'cleanup')
  })
})
