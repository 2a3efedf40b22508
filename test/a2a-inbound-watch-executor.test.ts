/**
 * A2A tasks waiting for input whose blocked runs end without an answer from
 * the A2A client, with the watch in place, driven with the official
 * @a2a-js/sdk client: the executor failing the run ends the task FAILED with
 * the failure, and the run handed off to another agent (by its delegator,
 * the gateway's node: an executor may not hand off a blocked run) keeps the
 * task WORKING and follows the next run to its output.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import type { StreamResponse, Task } from '@a2a-js/sdk'
import { ClientFactory, type Client } from '@a2a-js/sdk/client'
import type { MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { A2aServer } from '../src/a2a/server.ts'
import { PART_FAILURE, PART_OUTPUT } from '../src/a2a/constants.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { asTask, handlerOf, partData, runIdOf, send, stateOf } from './fixtures/a2a-messages.ts'

/** Blocks, then does what the test says while still blocked. */
const ASK = { capability_id: 'cap:ask-then-decide', version: '1.0.0' }

type Move = 'fail' | 'handoff'

describe('A2A inbound: a run its task waits on ends without the A2A client', () => {
  let nodes: MeshNode[] = []
  let worker: MeshNode, specialist: MeshNode, gateway: MeshNode
  let a2a: A2aServer
  let client: Client
  /** Per correlation, what the worker's blocked run is to do next. */
  const moves = new Map<string, (move: Move) => void>()
  /** Why each blocked run's wait for a resolution ended without one. */
  const unanswered: unknown[] = []

  beforeAll(async () => {
    nodes = await startMesh(3, { transport: 'tcp' })
    ;[worker, specialist, gateway] = nodes as [MeshNode, MeshNode, MeshNode]
    worker.runs.handle(ASK, async (ctx) => {
      const move = new Promise<Move>(resolve => { moves.set(ctx.run.correlation_id, resolve) })
      // the run ends while blocked: the wait for a resolution then rejects, which is expected here
      ctx.block('needs a human yes', `cp-${ctx.run.correlation_id}`).catch((err: unknown) => { unanswered.push(err) })
      // the test moves once the A2A task waits for input, so the block is in by then; a handoff is its delegator's,
      // made by the test before it lets the handler go
      if (await move === 'fail') await ctx.fail('no human answered in time')
      return undefined
    })
    specialist.runs.handle(ASK, async (ctx) => ({ decided_by: 'specialist', context: ctx.handedOff?.context ?? null }))
    await worker.publishCard({ name: 'worker', description: 'asks, then fails or hands off', capabilities: [ASK], tags: ['test'] })
    await specialist.publishCard({ name: 'specialist', capabilities: [ASK], tags: ['test'] })
    await gateway.publishCard({ name: 'gateway', capabilities: [] })
    a2a = await A2aServer.start(gateway, { port: 0, logger: silentLogger() })
    client = await new ClientFactory().createFromUrl(a2a.clientUrl(worker.agentId))
  })
  afterAll(async () => {
    await a2a?.close()
    await stopAll(nodes)
  })

  async function waiting (contextId: string): Promise<{ task: Task, streamed: Promise<StreamResponse[]> }> {
    const task = asTask(await client.sendMessage(send(ASK, { order: contextId }, contextId)))
    expect(task.status?.state).toBe(TaskState.TASK_STATE_INPUT_REQUIRED)
    const handler = await handlerOf(a2a, worker.agentId)
    expect(handler.runs.get(task.id)?.waiting).toBe(true)
    const stream = client.resubscribeTask({ tenant: '', id: task.id })
    const first = await stream.next()
    expect(first.done).toBe(false)
    const streamed = (async () => {
      const seen = first.done === true ? [] : [first.value]
      for await (const ev of stream) seen.push(ev)
      return seen
    })()
    return { task, streamed }
  }

  it('the executor failing the blocked run ends the task FAILED with the failure, on GetTask and on its stream', async () => {
    const { task, streamed } = await waiting('corr-exec-fail')
    moves.get('corr-exec-fail')?.('fail')
    const states = (await streamed).map(stateOf).filter(s => s !== undefined)
    expect(states.at(-1)).toBe(TaskState.TASK_STATE_FAILED)
    const got = await client.getTask({ tenant: '', id: task.id })
    expect(got.status?.state).toBe(TaskState.TASK_STATE_FAILED)
    expect(partData(got.status?.message?.parts, PART_FAILURE)).toMatchObject({ code: 'HANDLER_FAILED', message: 'no human answered in time' })
    expect((await gateway.getRun(runIdOf(task))).state).toBe('failed')
    const handler = await handlerOf(a2a, worker.agentId)
    await until(() => handler.runs.get(task.id) === undefined, 'the watch of the failed task to go')
  })

  it('the blocked run handed off by its delegator keeps the task WORKING, then the next run\'s output completes it', async () => {
    const { task, streamed } = await waiting('corr-exec-handoff')
    const first = runIdOf(task)
    await gateway.handoff(first, specialist.agentId, { note: 'the specialist decides', input: { order: 'corr-exec-handoff' } })
    moves.get('corr-exec-handoff')?.('handoff')
    const states = (await streamed).map(stateOf).filter(s => s !== undefined)
    expect(states.slice(1)).toContain(TaskState.TASK_STATE_WORKING)
    expect(states.at(-1)).toBe(TaskState.TASK_STATE_COMPLETED)
    const got = await client.getTask({ tenant: '', id: task.id })
    expect(got.status?.state).toBe(TaskState.TASK_STATE_COMPLETED)
    expect(partData(got.artifacts[0]?.parts, PART_OUTPUT)?.output).toEqual({
      decided_by: 'specialist', context: { note: 'the specialist decides', input: { order: 'corr-exec-handoff' } }
    })
    // the task names the run that carried it on, on the specialist
    const next = (await gateway.getRun(first)).handoff_to
    expect(next?.agent_id).toBe(specialist.agentId)
    expect(runIdOf(got)).toBe(next?.run_id)
  })
})
