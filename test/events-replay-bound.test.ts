/**
 * A replay reads a correlation's events into memory within REPLAY_MAX_BYTES:
 * past it the replay is refused with a typed error before the node holds much
 * more than that (a correlation may hold up to 1024 runs of 65,536 events of
 * up to 48 KiB each, and the answer carries them twice). Found by session 45's
 * events review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { REPLAY_MAX_BYTES } from '../src/events/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:replay-bound', version: '1.0.0' }
const TASK = 'task-replay-bound'

describe('the bytes a replay reads', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async (ctx) => {
      for (let i = 0; i < 4; i++) await ctx.progress({ step: i, text: 'x'.repeat(2000) })
      return { ok: true }
    })
    await B.publishCard({ name: 'b', capabilities: [CAP] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('past the bound: INVALID_REQUEST replay_too_large; within it, the whole lifecycle', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: CAP, input: {} })
    await until(async () => (await A.events.lastEvent(run.run_id))?.type === 'run.completed', 'A to hold the whole run')
    await expect(A.events.readCorrelation(TASK, 4000)).rejects.toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'replay_too_large', max_bytes: 4000 } })
    const replay = await A.events.replay(TASK)
    expect(replay.events.map(e => e.type)).toEqual(['run.started', 'run.progress', 'run.progress', 'run.progress', 'run.progress', 'run.completed'])
    expect(JSON.stringify(replay.events).length).toBeLessThan(REPLAY_MAX_BYTES)
  })
})
