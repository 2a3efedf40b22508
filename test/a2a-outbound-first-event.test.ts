/**
 * An A2A server that takes a streamed message and never sends an event does
 * not hold the run for the task's whole bound (A2A_TASK_MAX_MS, an hour):
 * the stream's first event is due within A2A_CALL_TIMEOUT_MS, as a unary
 * call's answer is, and past it the run fails saying so.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AgentExecutor } from '@a2a-js/sdk/server'
import { A2aOutbound, mergeDrafts } from '../src/a2a/outbound.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { startA2aServer, type A2aServerHandle } from '../scripts/lib/ref-a2a.ts'
import { startMesh, stopAll, until } from './helpers.ts'

// the server takes (and stores) the message within this bound on a quiet machine in a few ms; a busy one that took
// longer had the run fail before the server knew of the message (300 ms until session 66)
const FIRST_EVENT_MS = 2_000

describe('A2A outbound: a stream with no first event', () => {
  let nodes: MeshNode[] = []
  let server: A2aServerHandle
  let cap: { capability_id: string, version: string }
  const release = Promise.withResolvers<void>()
  let executions = 0

  /** Takes the task and says nothing until the test ends. */
  const silent: AgentExecutor = {
    execute: async (): Promise<void> => {
      executions++
      await release.promise
    },
    cancelTask: async (): Promise<void> => {}
  }

  beforeAll(async () => {
    nodes = await startMesh(2, { transport: 'tcp' })
    server = await startA2aServer({ executor: silent, streaming: true })
    const agent = await new A2aOutbound(nodes[1]!, silentLogger(), { firstEventMs: FIRST_EVENT_MS }).add(server.url)
    cap = agent.draft.capabilities![0]!
    await nodes[1]!.publishCard(mergeDrafts(undefined, [agent.draft])!)
  })
  afterAll(async () => {
    release.resolve()
    await server?.close()
    await stopAll(nodes)
  })

  it('the run fails once the first event is overdue, naming the bound', async () => {
    const [caller, bridge] = nodes as [MeshNode, MeshNode]
    const run = await caller.delegate({ to_agent: bridge.agentId, task_id: 'task-first-event', capability: cap, input: { text: 'go' } })
    await until(() => executions === 1, 'the server to take the message')
    await until(async () => (await bridge.runs.store.get(run.run_id))?.state === 'failed', 'the run to fail', 10_000)
    const failed = await bridge.runs.store.get(run.run_id)
    expect(failed?.failure?.message).toContain(`sent no event of its stream within ${FIRST_EVENT_MS} ms`)
    expect(failed?.failure?.message).toContain('A2A_CALL_TIMEOUT_MS')
  })
})
