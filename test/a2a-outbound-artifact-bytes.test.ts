/**
 * The outbound bridge bounded a forwarded task's artifacts by the bytes of their parts only (TaskView.artifact):
 * an A2A server streaming artifacts with no parts but large descriptions, each under its own artifactId, had all
 * of them held (for up to A2A_TASK_MAX_MS, an hour) while the run went on. Whole artifacts count now, and the run
 * fails past A2A_OUTBOUND_ARTIFACT_MAX_BYTES.
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

const DESC_CHARS = 256 * 1024
/** 16 MiB of descriptions in all, far past the bound. */
const COUNT = 64
let published = 0
const canceled = Promise.withResolvers<string>()

const emptyPartArtifacts: AgentExecutor = {
  execute: async (ctx: RequestContext, bus: ExecutionEventBus): Promise<void> => {
    const { taskId, contextId } = ctx
    bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: new Date().toISOString() }, artifacts: [], history: [ctx.userMessage], metadata: undefined }))
    for (let i = 0; i < COUNT; i++) {
      published++
      bus.publish(AgentEvent.artifactUpdate({
        taskId, contextId, append: false, lastChunk: true, metadata: undefined,
        artifact: { artifactId: `a-${i}`, name: `a-${i}`, description: 'd'.repeat(DESC_CHARS), parts: [], metadata: undefined, extensions: [] }
      }))
    }
    const id = await canceled.promise
    bus.publish(AgentEvent.statusUpdate({ taskId: id, contextId, status: { state: TaskState.TASK_STATE_CANCELED, message: undefined, timestamp: new Date().toISOString() }, metadata: undefined }))
    bus.finished()
  },
  cancelTask: async (taskId: string): Promise<void> => { canceled.resolve(taskId) }
}

describe('a2a outbound: artifacts counted whole', () => {
  let nodes: MeshNode[] = []
  let server: A2aServerHandle
  let cap: { capability_id: string, version: string }

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    server = await startA2aServer({ executor: emptyPartArtifacts, streaming: true })
    const out = new A2aOutbound(nodes[1]!, silentLogger())
    const agent = await out.add(server.url)
    cap = agent.draft.capabilities![0]!
    await nodes[1]!.publishCard(mergeDrafts(undefined, [agent.draft])!)
  })
  afterAll(async () => {
    canceled.resolve('')
    await server?.close()
    await stopAll(nodes)
  })

  it('fails the run once the held artifacts pass the bound, parts or not', async () => {
    const [caller, bridge] = nodes as [MeshNode, MeshNode]
    const run = await caller.delegate({ to_agent: bridge.agentId, task_id: 'task-empty-parts', capability: cap, input: { text: 'go' } })
    await until(async () => (await bridge.runs.store.get(run.run_id))?.state === 'failed', 'the run to fail past the bound', 30_000)
    // the run failed before the server had sent what its artifacts add up to
    expect(published * DESC_CHARS).toBeGreaterThan(A2A_OUTBOUND_ARTIFACT_MAX_BYTES)
  }, 60_000)
})
