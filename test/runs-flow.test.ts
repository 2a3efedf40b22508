import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { RunContext } from '../src/runs/runtime.ts'
import { nextEvent, rejectsWith, startMesh, stopAll } from './helpers.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }

describe('one task across three nodes: delegate, block, resume, handoff, complete', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const seenByB: Array<Record<string, unknown>> = []
  let cInput: RunContext['handedOff'] = null

  beforeAll(async () => {
    nodes = await startMesh(3, { bootstrapOf: i => i - 1 })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(REVIEW, async (ctx) => {
      await ctx.progress({ step: 'reading diff' })
      const resolution = await ctx.block('needs a human decision', 'cp-approve-1')
      seenByB.push(resolution)
      await ctx.handoff(C.agentId, { reason: 'security review', resolution })
    })
    C.runs.handle(REVIEW, async (ctx) => {
      cInput = ctx.handedOff
      return { verdict: 'approved', by: 'C' }
    })
    await B.publishCard({ name: 'reviewer-b', capabilities: [REVIEW], tags: ['reviewer'] })
    await C.publishCard({ name: 'security-c', capabilities: [REVIEW], tags: ['security'] })
    await Promise.all([B.discovery.announce(), C.discovery.announce()])
  })
  afterAll(async () => { await stopAll(nodes) })

  it('runs the whole flow with one correlation_id and read-only history', async () => {
    // 1. A finds B through discovery and delegates
    const found = await A.discover({ capability: REVIEW, tags: ['reviewer'] })
    expect(found.map(c => c.agent_id)).toEqual([B.agentId])
    const blocked = nextEvent(B, e => e.type === 'run.blocked')
    const run = await A.delegate({ to_agent: found[0]!.agent_id, task_id: 'task-01', capability: REVIEW, input: { pr: 42 } })
    expect(run.correlation_id).toBe('task-01')
    expect(run.agent_id).toBe(B.agentId)
    expect(run.delegator).toBe(A.agentId)

    // 2. B blocks on a checkpoint
    const be = await blocked
    expect(be.payload.checkpoint_id).toBe('cp-approve-1')
    expect((await A.getRun(run.run_id)).state).toBe('blocked')

    // 3. B's own resume is refused: a blocked run never resumes itself
    await rejectsWith(B.resume(run.run_id, { approved: true }), 'INVALID_TRANSITION')
    // a third agent may not resume it either
    await rejectsWith(C.resume(run.run_id, { approved: true }), 'UNAUTHORIZED')
    expect((await A.getRun(run.run_id)).state).toBe('blocked')

    // 4. A resumes; B's handler receives the resolution unchanged
    const done = nextEvent(C, e => e.type === 'run.completed')
    const resolution = { approved: true, note: 'lgtm', reviewers: ['h1'], nested: { n: 1 } }
    const resumed = await A.resume(run.run_id, resolution)
    expect(resumed.state).toBe('running')

    // 5-6. B hands off to C, C completes
    const ce = await done
    expect(seenByB).toEqual([resolution])
    expect(cInput?.from).toEqual({ run_id: run.run_id, agent_id: B.agentId })
    expect(cInput?.context).toEqual({ reason: 'security review', resolution })

    // 7. the same correlation everywhere; the old run is read-only history
    const old = await A.getRun(run.run_id)
    expect(old.state).toBe('completed')
    expect(old.handoff_to?.agent_id).toBe(C.agentId)
    const next = await A.getRun(old.handoff_to!.run_id)
    expect(next.state).toBe('completed')
    expect(next.output).toEqual({ verdict: 'approved', by: 'C' })
    expect(next.handoff_from).toEqual({ run_id: run.run_id, agent_id: B.agentId })
    expect(next.delegator).toBe(A.agentId)
    expect(ce.correlation_id).toBe('task-01')
    expect(new Set([run.correlation_id, old.correlation_id, next.correlation_id])).toEqual(new Set(['task-01']))
    await rejectsWith(A.block(run.run_id, 'again', 'cp-2'), 'INVALID_TRANSITION')
    await rejectsWith(A.resume(run.run_id, {}), 'INVALID_TRANSITION')
    await rejectsWith(A.handoff(run.run_id, C.agentId, {}), 'INVALID_TRANSITION')
  })
})
