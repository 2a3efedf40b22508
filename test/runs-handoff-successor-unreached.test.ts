/**
 * A delegator records the successor of a run handed off by asking its executor (get_run), so liveness watches
 * it. When that one ask failed (the successor's executor unreachable at that moment) the delegator held no
 * record of the successor at all: nothing watched it, no restart looked for it, and a successor whose executor
 * then died never ended. Now a record is kept from the handoff's link alone, watched like any other, and
 * replaced by the executor's first answer.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CONTROL_PROTOCOL } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { heldRun, holdingWorkers, startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:successor-unreached', version: '1.0.0' }

describe('the successor of a handoff its delegator cannot ask about', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const held = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    nodes = await startMesh(3, { nodeOptions: i => i === 0 ? { liveness: { probeIntervalMs: 200, lostAfterMs: 1_500 } } : {} })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    await holdingWorkers([B, C], WORK, held)
  }, 60_000)
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  it('is recorded from the handoff, watched, and declared lost when its executor never answers', async () => {
    const runId = await heldRun(A, B, WORK, 'task-successor-unreached', held)
    // C runs the successor, but answers no control request: the delegator's ask about it fails
    await C.host.unhandle(CONTROL_PROTOCOL)
    const next = await B.runs.handoff(runId, C.agentId, {})
    await until(async () => (await A.runs.store.getOutgoing(runId))?.handoff_to?.run_id === next.run_id, 'the delegator to learn of the handoff')
    await until(async () => (await A.runs.store.getOutgoing(next.run_id)) !== undefined, 'a record of the successor at the delegator')
    const kept = await A.runs.store.getOutgoing(next.run_id)
    expect(kept).toMatchObject({ agent_id: C.agentId, delegator: A.agentId, handoff_from: { run_id: runId, agent_id: B.agentId } })
    // watched: its executor never answers, so the delegator ends it
    await until(async () => (await A.runs.store.getOutgoing(next.run_id))?.state === 'failed', 'the successor to be declared lost', 20_000)
    expect((await A.runs.store.getOutgoing(next.run_id))?.failure?.code).toBe('EXECUTOR_LOST')
  }, 60_000)
})
