/**
 * A handler's block is held to what the API checks of a block request: a
 * checkpoint id over CHECKPOINT_ID_MAX_CHARS is refused (the handler hears
 * INVALID_REQUEST), and a reason over REASON_MAX_CHARS is cut, so a blocked
 * run always matches the Run schema and its delegator can read and resume it.
 * Before, a handler passing on what a remote agent said (an A2A agent's
 * question) made a run.blocked that nobody but the executor could read.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CHECKPOINT_ID_MAX_CHARS, REASON_MAX_CHARS } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { nextEvent, startMesh, stopAll } from './helpers.ts'

const ASK = { capability_id: 'cap:ask', version: '1.0.0' }

describe('the bounds of a handler\'s block', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  const blockErrors: unknown[] = []

  beforeAll(async () => {
    nodes = await startMesh(2, { bootstrapOf: () => 0 })
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(ASK, async (ctx) => {
      try {
        return { resolution: await ctx.block(String(ctx.input.reason), String(ctx.input.checkpoint)) }
      } catch (err) {
        blockErrors.push(err)
        throw err
      }
    })
    await B.publishCard({ name: 'asker', capabilities: [ASK] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('a long reason is cut: the delegator reads the blocked run and resumes it', async () => {
    const blocked = nextEvent(B, e => e.type === 'run.blocked' && e.correlation_id === 'task-long-reason')
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-long-reason', capability: ASK, input: { reason: 'why? '.repeat(2000), checkpoint: 'cp-ok' } })
    await blocked
    const seen = await A.getRun(run.run_id)
    expect(seen.state).toBe('blocked')
    const done = nextEvent(B, e => e.type === 'run.completed' && e.run_id === run.run_id)
    const resumed = await A.resume(run.run_id, { answer: 42 })
    expect(resumed.state).not.toBe('blocked')
    const completed = await done
    expect(completed.payload).toMatchObject({ output: { resolution: { answer: 42 } } })
    const finished = (await B.runs.list({ correlation_id: 'task-long-reason' })).executing[0]
    expect(finished?.state).toBe('completed')
    expect(REASON_MAX_CHARS).toBeLessThan('why? '.repeat(2000).length)
  })

  it('a checkpoint id over its limit is refused to the handler, and the run fails readable', async () => {
    const failed = nextEvent(B, e => e.type === 'run.failed' && e.correlation_id === 'task-long-cp')
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-long-cp', capability: ASK, input: { reason: 'r', checkpoint: 'c'.repeat(CHECKPOINT_ID_MAX_CHARS + 1) } })
    await failed
    expect(blockErrors.at(-1)).toMatchObject({ code: 'INVALID_REQUEST' })
    expect((await A.getRun(run.run_id)).state).toBe('failed')
  })
})
