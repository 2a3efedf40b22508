/**
 * A forwarded A2A task whose artifacts grow past what a run's output could
 * ever carry (A2A_OUTBOUND_ARTIFACT_MAX_BYTES) fails its run as soon as they
 * do, instead of the bridge holding (and copying, on each append) every part
 * until the task ends. Real nodes and an @a2a-js/sdk server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import { AgentEvent, type AgentExecutor, type ExecutionEventBus, type RequestContext } from '@a2a-js/sdk/server'
import { A2A_OUTBOUND_ARTIFACT_MAX_BYTES } from '../src/a2a/constants.ts'
import { A2aOutbound, mergeDrafts } from '../src/a2a/outbound.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startA2aServer, type A2aServerHandle } from '../scripts/lib/ref-a2a.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CHUNK_CHARS = 8 * 1024
const CHUNKS = Math.ceil(A2A_OUTBOUND_ARTIFACT_MAX_BYTES / CHUNK_CHARS) * 4
let published = 0
const canceled = Promise.withResolvers<string>()

/** WORKING, then one artifact appended to in chunks, far past the bound; then it works on until canceled. */
const growingArtifact: AgentExecutor = {
  execute: async (ctx: RequestContext, bus: ExecutionEventBus): Promise<void> => {
    const { taskId, contextId } = ctx
    const now = new Date().toISOString()
    bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: now }, artifacts: [], history: [ctx.userMessage], metadata: undefined }))
    for (let i = 0; i < CHUNKS; i++) {
      published++
      bus.publish(AgentEvent.artifactUpdate({
        taskId, contextId, append: i > 0, lastChunk: i === CHUNKS - 1, metadata: undefined,
        artifact: { artifactId: 'big', name: 'big', description: '', parts: [{ content: { $case: 'text', value: 'x'.repeat(CHUNK_CHARS) }, metadata: undefined, filename: '', mediaType: 'text/plain' }], metadata: undefined, extensions: [] }
      }))
    }
    const taskId2 = await canceled.promise
    bus.publish(AgentEvent.statusUpdate({ taskId: taskId2, contextId, status: { state: TaskState.TASK_STATE_CANCELED, message: undefined, timestamp: new Date().toISOString() }, metadata: undefined }))
    bus.finished()
  },
  cancelTask: async (taskId: string): Promise<void> => { canceled.resolve(taskId) }
}

describe('a forwarded A2A task with artifacts past the bound', () => {
  let nodes: MeshNode[] = []
  let server: A2aServerHandle
  let cap: { capability_id: string, version: string }

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    server = await startA2aServer({ executor: growingArtifact, streaming: true })
    const out = new A2aOutbound(nodes[1]!, silentLogger())
    const agent = await out.add(server.url)
    cap = agent.draft.capabilities![0]!
    await nodes[1]!.publishCard(mergeDrafts(undefined, [agent.draft])!)
  })
  afterAll(async () => {
    await server?.close()
    await stopAll(nodes)
  })

  it('fails its run with the reason, and cancels the A2A task', async () => {
    const [caller, bridge] = nodes as [MeshNode, MeshNode]
    const run = await caller.delegate({ to_agent: bridge.agentId, task_id: 'task-big-artifact', capability: cap, input: { text: 'go' } })
    await until(async () => (await bridge.runs.store.get(run.run_id))?.state === 'failed', 'the run to fail', 30_000)
    const failed = await bridge.runs.store.get(run.run_id)
    expect(failed?.failure?.message).toContain(`passed ${A2A_OUTBOUND_ARTIFACT_MAX_BYTES} bytes`)
    expect(published).toBe(CHUNKS)
    // the agent is told to stop the work nobody will read
    expect(await canceled.promise).toBeTruthy()
  })
})
