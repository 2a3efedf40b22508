/**
 * A run this node delegated whose events never reach it (its executor returned the handle and went away
 * before anything of it was held here) kept its correlation tracked, on gossip and its tail fetched from the
 * gone executor, for as long as the node ran, after liveness had ended the delegator's record with no event
 * to chain a verdict to. The record's end now lets the run's correlation go.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:evsub-headless', version: '1.0.0' }
const TASK = 'task-evsub-headless'

describe('a delegated run of which nothing is ever held', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2, { nodeOptions: i => i === 0 ? { liveness: { lostAfterMs: 1500, probeIntervalMs: 300 } } : {} })
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async (ctx) => {
      await new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })
      return { ok: true }
    })
    await B.publishCard({ name: 'evsub-headless', capabilities: [CAP] })
    // the executor's gossip never reaches A (lost, or an executor that keeps its log to itself)
    const pubsub = B.host.services.pubsub as unknown as { publish: (...a: unknown[]) => Promise<unknown> }
    pubsub.publish = async () => ({ recipients: [] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('lets the correlation go once the delegator\'s record has ended', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: CAP, input: {} })
    // the executor goes away for good before A fetched anything
    await B.stop()
    expect(A.events.topics()).toContain(TASK)
    await until(async () => (await A.runs.store.getOutgoing(run.run_id))?.state === 'failed', 'liveness to end the record', 30_000)
    await until(() => !A.events.topics().includes(TASK), 'the correlation to be let go', 15_000)
    expect(A.events.participants(TASK)).toEqual([])
  }, 60_000)
})
