/**
 * The outbound bridge resumes an A2A task with a message on it. A server may
 * answer that message with the task as it stood when the answer came (still
 * INPUT_REQUIRED, the very status the run's block answered) before it works
 * on it: the bridge takes that for the request it already answered, not for
 * a new one, and reads on (polling or streaming) until the task moves.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Role, TaskState } from '@a2a-js/sdk'
import { AgentEvent, type AgentExecutor, type ExecutionEventBus, type RequestContext } from '@a2a-js/sdk/server'
import { A2aOutbound, mergeDrafts } from '../src/a2a/outbound.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startA2aServer, type A2aServerHandle } from '../scripts/lib/ref-a2a.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const now = (): string => new Date().toISOString()

/** Asks for input once; on the answer, shows the task as it stands (still asking), then works and completes. */
const executor: AgentExecutor = {
  execute: async (ctx: RequestContext, bus: ExecutionEventBus): Promise<void> => {
    const { taskId, contextId } = ctx
    if (ctx.task === undefined) {
      bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: now() }, artifacts: [], history: [ctx.userMessage], metadata: undefined }))
      const ask = { messageId: `ask-${taskId}`, contextId, taskId, role: Role.ROLE_AGENT, parts: [{ content: { $case: 'text' as const, value: 'approve?' }, metadata: undefined, filename: '', mediaType: 'text/plain' }], metadata: undefined, extensions: [], referenceTaskIds: [] }
      bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_INPUT_REQUIRED, message: ask, timestamp: now() }, metadata: undefined }))
      bus.finished()
      return
    }
    bus.publish(AgentEvent.task(ctx.task))
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: now() }, metadata: undefined }))
    bus.publish(AgentEvent.artifactUpdate({
      taskId, contextId, append: false, lastChunk: true, metadata: undefined,
      artifact: { artifactId: 'r', name: 'r', description: '', parts: [{ content: { $case: 'data', value: { ok: true } }, metadata: undefined, filename: '', mediaType: 'application/json' }], metadata: undefined, extensions: [] }
    }))
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_COMPLETED, message: undefined, timestamp: now() }, metadata: undefined }))
    bus.finished()
  },
  cancelTask: async (): Promise<void> => {}
}

describe.each([false, true])('A2A outbound (streaming %s): a resume answered with the task as it stands', (streaming) => {
  let nodes: MeshNode[] = []
  let server: A2aServerHandle
  let cap: { capability_id: string, version: string }

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    server = await startA2aServer({ executor, streaming })
    const agent = await new A2aOutbound(nodes[1]!, silentLogger()).add(server.url)
    cap = agent.draft.capabilities![0]!
    await nodes[1]!.publishCard(mergeDrafts(undefined, [agent.draft])!)
  })
  afterAll(async () => {
    await server?.close()
    await stopAll(nodes)
  })

  it('one input request, one answer: the run completes, without a second block', async () => {
    const [caller, bridge] = nodes as [MeshNode, MeshNode]
    const run = await caller.delegate({ to_agent: bridge.agentId, task_id: `task-answered-${String(streaming)}`, capability: cap, input: { text: 'go' } })
    await until(async () => (await bridge.runs.store.get(run.run_id))?.state === 'blocked', 'the first block')
    const first = (await bridge.runs.store.get(run.run_id))!.checkpoint_id
    await caller.resume(run.run_id, { approved: true })
    // done, or blocked again on a checkpoint of its own making
    await until(async () => {
      const r = await bridge.runs.store.get(run.run_id)
      return r?.state === 'completed' || r?.state === 'failed' || (r?.state === 'blocked' && r.checkpoint_id !== first)
    }, 'the run to move past the answer')
    const after = await bridge.runs.store.get(run.run_id)
    expect(after?.state).toBe('completed')
    expect(after?.output).toMatchObject({ artifacts: [{ artifact_id: 'r' }] })
  })
})
