/**
 * A run blocked on a checkpoint does not go on elsewhere before it is
 * resumed (the profile: a blocked run MUST NOT resume itself): its handler's
 * handoff waits for the resume, as its progress does, and the executor's own
 * request to hand it off is refused. Its delegator may still hand it on. A
 * log in which the executor resumed its own run does not move the
 * delegator's view, and the audit replay marks that step and leaves the
 * checkpoint unresolved. Nor is new work delegated under a blocked or
 * ended run.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { RunContext } from '../src/runs/types.ts'
import type { RunExecutor } from '../src/runs/executor.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:blocked-handoff', version: '1.0.0' }

describe('handing off a blocked run', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const contexts = new Map<string, RunContext>()
  const releases = new Map<string, () => void>()
  const onC = new Set<string>()

  beforeAll(async () => {
    nodes = await startMesh(3, { bootstrapOf: i => i - 1 })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(CAP, async (ctx) => {
      contexts.set(ctx.run.correlation_id, ctx)
      await new Promise<void>(resolve => { releases.set(ctx.run.correlation_id, resolve) })
      return { from: 'B' }
    })
    C.runs.handle(CAP, async (ctx) => { onC.add(ctx.run.correlation_id); return { from: 'C' } })
    await B.publishCard({ name: 'b', capabilities: [CAP] })
    await C.publishCard({ name: 'c', capabilities: [CAP] })
  }, 120_000)
  afterAll(async () => {
    for (const release of releases.values()) release()
    await stopAll(nodes)
  })

  async function blockedOnB (task: string): Promise<{ runId: string, ctx: RunContext }> {
    const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: CAP, input: {} })
    await until(() => contexts.has(task), 'the handler on B to start')
    await A.block(run.run_id, 'a human decides', `cp-${task}`)
    const ctx = contexts.get(task)!
    await until(() => ctx.blocked !== null, 'B to see the block')
    return { runId: run.run_id, ctx }
  }

  it('a handler\'s handoff waits for the resume, which resolves the checkpoint; then the run goes on to the receiver', async () => {
    const { runId, ctx } = await blockedOnB('bh-wait')
    const handed = ctx.handoff(C.agentId, { note: 'yours' })
    // asked while the handoff is under way: it must find the run still blocked, and resume it
    const resumed = await A.resume(runId, { approved: true }, { checkpointId: 'cp-bh-wait' })
    expect(resumed.state).toBe('running')
    const next = await handed
    expect(next.agent_id).toBe(C.agentId)
    await until(() => onC.has('bh-wait'), 'the successor to run on C')
    // B's log: the resume comes before the handoff
    const log = (await B.events.replay('bh-wait')).events.filter(e => e.run_id === runId)
    expect(log.map(e => (e.payload.transition as string | undefined) ?? e.type)).toEqual(['run.started', 'run.blocked', 'resume', 'handoff'])
  }, 60_000)

  it('the executor\'s own request to hand off a blocked run is refused, and its delegator may hand it on', async () => {
    const { runId } = await blockedOnB('bh-refuse')
    await rejectsWith(B.runs.handoff(runId, C.agentId, {}), 'INVALID_TRANSITION')
    expect((await A.getRun(runId)).state).toBe('blocked')
    // the owner's decision: handed on, the checkpoint stays unresolved
    const next = await A.handoff(runId, C.agentId, { note: 'skip the review' })
    expect(next.agent_id).toBe(C.agentId)
    await until(() => onC.has('bh-refuse'), 'the successor to run on C')
  }, 60_000)

  it('a log in which the executor resumed its own run moves nothing on the delegator, and the replay marks it', async () => {
    const { runId } = await blockedOnB('bh-self')
    // what patched code on B would commit: a resume in its own name
    const executor = (B.runs as unknown as { executor: RunExecutor }).executor
    const committed = await executor.apply(runId, { type: 'resume', resolution: { approved: true } }, { role: 'delegator', agent_id: B.agentId })
    expect(committed.state).toBe('running')
    // A follows the run's events: they reach it, and its view does not take the step
    await until(async () => (await A.events.replay('bh-self')).events.some(e => e.run_id === runId && e.seq === 3), 'A to hold the resume event')
    const delegated = (await A.runs.list({}, {})).delegated.find(r => r.run_id === runId)
    expect(delegated?.state).toBe('blocked')
    const replay = await A.events.replay('bh-self')
    expect(replay.transitions.find(t => t.kind === 'resume')).toMatchObject({ by: B.agentId, violation: 'self_resume' })
    expect(replay.checkpoints).toEqual([expect.objectContaining({ checkpoint_id: 'cp-bh-self', resolved_by: null, resolution: null })])
  }, 60_000)

  it('no work is delegated under a run while it is blocked, nor once it has ended', async () => {
    const { runId } = await blockedOnB('bh-child')
    const child = { to_agent: C.agentId, task_id: 'bh-child', capability: CAP, input: {}, parent_run: runId }
    const blocked = await rejectsWith(B.delegate(child), 'INVALID_TRANSITION')
    expect(blocked.details).toMatchObject({ run_id: runId, state: 'blocked', reason: 'parent_not_running' })
    await A.cancel(runId, 'no longer needed')
    const ended = await rejectsWith(B.delegate(child), 'INVALID_TRANSITION')
    expect(ended.details).toMatchObject({ run_id: runId, state: 'failed' })
    expect(onC.has('bh-child')).toBe(false)
  }, 60_000)
})
