/**
 * A forwarded run that ends before the A2A server's first stream event (the
 * mesh run canceled, or the first event overdue) still cancels the task the
 * server made for it: the bridge does not know the task's id yet, so it looks
 * the task up by the run's context (ListTasks) and the message it sent, and
 * cancels it. A task of the same context that its message did not make is
 * left alone.
 */
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AGENT_CARD_PATH, Role, TaskState, type Task } from '@a2a-js/sdk'
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore, type AgentExecutor, type ServerCallContext } from '@a2a-js/sdk/server'
import { agentCardHandler, jsonRpcHandler, restHandler, UserBuilder } from '@a2a-js/sdk/server/express'
import express from 'express'
import { A2aOutbound, mergeDrafts } from '../src/a2a/outbound.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { A2A_JSONRPC_PATH, A2A_REST_PATH, buildAgentCard } from '../scripts/lib/ref-a2a.ts'
import { startMesh, stopAll, until } from './helpers.ts'

// the server takes (and stores) the message within this bound on a quiet machine in a few ms; a busy one that took
// longer had the run fail before the server knew of the message (300 ms until session 66)
const FIRST_EVENT_MS = 2_000

/**
 * A streaming A2A server whose executor sends its first event only once released; it stores its task at once
 * (`storesEarly`), or leaves that to the SDK, which stores a task with its first event (a plain SDK server).
 */
class LateServer {
  private readonly storesEarly: boolean
  constructor (storesEarly = true) { this.storesEarly = storesEarly }

  url = ''
  readonly store = new InMemoryTaskStore()
  /** Task ids stored by the executor, and those CancelTask reached. */
  readonly made: string[] = []
  readonly canceled: string[] = []
  private readonly contexts = new Map<string, string>()
  /** Tasks stored (in the caller's scope) when the first message comes. */
  readonly seed: Task[] = []
  scope: ServerCallContext | undefined
  readonly release = Promise.withResolvers<void>()
  /** ListTasks calls answered. */
  lists = 0
  private close_: () => Promise<void> = async () => {}

  async start (): Promise<void> {
    const app = express()
    const server = app.listen(0, '127.0.0.1')
    await once(server, 'listening')
    this.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    const card = buildAgentCard(this.url)
    card.capabilities = { ...card.capabilities, streaming: true, extensions: [] }
    const executor: AgentExecutor = {
      execute: async (ctx, bus): Promise<void> => {
        const task: Task = {
          id: ctx.taskId,
          contextId: ctx.contextId,
          status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: new Date().toISOString() },
          artifacts: [],
          history: [ctx.userMessage],
          metadata: undefined
        }
        for (const t of this.seed.splice(0)) await this.store.save(t, ctx.context)
        this.scope = ctx.context
        if (this.storesEarly) await this.store.save(task, ctx.context)
        this.made.push(ctx.taskId)
        this.contexts.set(ctx.taskId, ctx.contextId)
        await this.release.promise
        bus.publish(AgentEvent.task(task))
      },
      cancelTask: async (taskId, bus): Promise<void> => {
        this.canceled.push(taskId)
        const status = { state: TaskState.TASK_STATE_CANCELED, message: undefined, timestamp: new Date().toISOString() }
        bus.publish(AgentEvent.task({ id: taskId, contextId: this.contexts.get(taskId) ?? '', status, artifacts: [], history: [], metadata: undefined }))
        bus.finished()
      }
    }
    const lists = (): void => { this.lists++ }
    const handler = new (class extends DefaultRequestHandler {
      override async listTasks (...args: Parameters<DefaultRequestHandler['listTasks']>): ReturnType<DefaultRequestHandler['listTasks']> {
        const answer = await super.listTasks(...args)
        lists()
        return answer
      }
    })(card, this.store, executor)
    app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }))
    app.use(A2A_JSONRPC_PATH, jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }))
    app.use(A2A_REST_PATH, restHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }))
    this.close_ = async () => {
      const closed = once(server, 'close')
      server.close()
      server.closeAllConnections()
      await closed
    }
  }

  async close (): Promise<void> {
    this.release.resolve()
    await this.close_()
  }
}

describe('A2A outbound: a run that ends before the first stream event cancels its A2A task', () => {
  let nodes: MeshNode[] = []
  const canceling = new LateServer()
  const overdue = new LateServer()
  const plain = new LateServer(false)
  let capCancel: { capability_id: string, version: string }
  let capOverdue: { capability_id: string, version: string }
  let capPlain: { capability_id: string, version: string }

  beforeAll(async () => {
    nodes = await startMesh(4, { transport: 'tcp' })
    await canceling.start()
    await overdue.start()
    await plain.start()
    const c = await new A2aOutbound(nodes[3]!, silentLogger()).add(plain.url)
    capPlain = c.draft.capabilities![0]!
    await nodes[3]!.publishCard(mergeDrafts(undefined, [c.draft])!)
    const a = await new A2aOutbound(nodes[1]!, silentLogger()).add(canceling.url)
    capCancel = a.draft.capabilities![0]!
    await nodes[1]!.publishCard(mergeDrafts(undefined, [a.draft])!)
    const b = await new A2aOutbound(nodes[2]!, silentLogger(), { firstEventMs: FIRST_EVENT_MS }).add(overdue.url)
    capOverdue = b.draft.capabilities![0]!
    await nodes[2]!.publishCard(mergeDrafts(undefined, [b.draft])!)
  })
  afterAll(async () => {
    await canceling.close()
    await overdue.close()
    await plain.close()
    await stopAll(nodes)
  })

  it('a mesh run canceled before the first event: CancelTask reaches the task, not another task of its context', async () => {
    const [caller, bridge] = nodes as [MeshNode, MeshNode]
    // a task of the same context the bridge did not make: it stays open
    const other: Task = {
      id: 'other-task',
      contextId: 'corr-unseen-cancel',
      status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: new Date().toISOString() },
      artifacts: [],
      history: [{ messageId: 'not-the-bridge', contextId: 'corr-unseen-cancel', taskId: 'other-task', role: Role.ROLE_USER, parts: [], metadata: undefined, extensions: [], referenceTaskIds: [] }],
      metadata: undefined
    }
    canceling.seed.push(other)
    const run = await caller.delegate({ to_agent: bridge.agentId, task_id: 'corr-unseen-cancel', capability: capCancel, input: { text: 'go' } })
    await until(() => canceling.made.length === 1, 'the server to store its task')
    await caller.cancel(run.run_id, 'no longer needed')
    await until(async () => (await bridge.runs.store.get(run.run_id))?.state === 'failed', 'the run to end canceled')
    await until(() => canceling.canceled.length > 0, 'CancelTask to reach the server')
    expect(canceling.canceled).toEqual([canceling.made[0]])
    const scope = canceling.scope
    if (scope === undefined) throw new Error('the server stored no task')
    await until(async () => (await canceling.store.load(canceling.made[0]!, scope))?.status?.state === TaskState.TASK_STATE_CANCELED, 'the task to be canceled')
    expect((await canceling.store.load('other-task', scope))?.status?.state).toBe(TaskState.TASK_STATE_WORKING)
  })

  it('a first event overdue: the run fails and CancelTask reaches the task', async () => {
    const [caller, , bridge] = nodes as [MeshNode, MeshNode, MeshNode]
    const run = await caller.delegate({ to_agent: bridge.agentId, task_id: 'corr-unseen-overdue', capability: capOverdue, input: { text: 'go' } })
    await until(() => overdue.made.length === 1, 'the server to store its task')
    await until(async () => (await bridge.runs.store.get(run.run_id))?.state === 'failed', 'the run to fail')
    expect((await bridge.runs.store.get(run.run_id))?.failure?.message).toContain(`sent no event of its stream within ${FIRST_EVENT_MS} ms`)
    await until(() => overdue.canceled.length > 0, 'CancelTask to reach the server')
    expect(overdue.canceled).toEqual([overdue.made[0]])
  })

  it('a server that stores the task only with its first event, after the run ended: the task is still found and canceled', async () => {
    const [caller, , , bridge] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    const run = await caller.delegate({ to_agent: bridge.agentId, task_id: 'corr-unseen-plain', capability: capPlain, input: { text: 'go' } })
    await until(() => plain.made.length === 1, 'the executor to take the message')
    await caller.cancel(run.run_id, 'no longer needed')
    await until(async () => (await bridge.runs.store.get(run.run_id))?.state === 'failed', 'the run to end canceled')
    // only once the bridge's first ListTasks found nothing does the executor send its first event, and the SDK
    // store the task
    await until(() => plain.lists > 0, 'the bridge to look for the task')
    plain.release.resolve()
    // the SDK cancels a task whose stream is gone in its store (its executor's cancelTask is not called then)
    const scope = (): ServerCallContext => {
      if (plain.scope === undefined) throw new Error('the executor took no message')
      return plain.scope
    }
    await until(async () => (await plain.store.load(plain.made[0]!, scope()))?.status?.state === TaskState.TASK_STATE_CANCELED, 'the task canceled')
  })
})
