/**
 * A resume names the checkpoint it answers (protocols/control.md, `resume`).
 * A run blocks on cp-staging, then, once resumed, on cp-production. Its
 * delegator A and an agent C it authorized both answer cp-staging: A's resume
 * goes through, and C's (or A's own retry after a timeout, which a caller
 * cannot tell from a lost resume) must be refused, not resolve cp-production
 * with the answer given to cp-staging. A resume that names no checkpoint
 * resolves the open one, as before. Real nodes on TCP loopback.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { namedGates, rejectsWith, startMesh, stopAll, until } from './helpers.ts'

/** Asks twice: staging, then production. */
const TWICE = { capability_id: 'cap:resume-two-checkpoints', version: '1.0.0' }
/** Asks once, then works on until the test lets it finish. */
const ONCE = { capability_id: 'cap:resume-one-checkpoint', version: '1.0.0' }

describe('runs: a resume that names its checkpoint resolves that one only', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const gates = namedGates()

  beforeAll(async () => {
    nodes = await startMesh(3, { bootstrapOf: () => 0 })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(TWICE, async (ctx) => {
      const staging = await ctx.block('deploy to staging?', 'cp-staging')
      const production = await ctx.block('deploy to production?', 'cp-production')
      return { staging, production }
    })
    B.runs.handle(ONCE, async (ctx) => {
      const answer = await ctx.block('go on?', 'cp-once')
      await gates.get(ctx.run.correlation_id).promise
      return { answer }
    })
    await B.publishCard({ name: 'deployer', capabilities: [TWICE, ONCE] })
  })
  afterAll(async () => {
    gates.openAll()
    await stopAll(nodes)
  })

  async function blockedOn (runId: string, checkpoint: string): Promise<Run> {
    await until(async () => {
      const run = await B.runs.getRun(runId)
      return run.state === 'blocked' && run.checkpoint_id === checkpoint
    }, `run ${runId} blocked on ${checkpoint}`)
    return B.runs.getRun(runId)
  }

  async function resumes (runId: string): Promise<Array<Record<string, unknown>>> {
    const events = await B.runs.store.log.read(runId)
    return events.filter(e => e.type === 'run.progress' && e.payload.transition === 'resume').map(e => e.payload)
  }

  it('a late or retried answer to cp-staging is refused (checkpoint_mismatch) and the run stays blocked on cp-production', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'resume-cp-stale', capability: TWICE, input: {}, authorized: [C.agentId] })
    await blockedOn(run.run_id, 'cp-staging')
    await A.resume(run.run_id, { approve: true, by: 'A' }, { checkpointId: 'cp-staging' })
    const blocked = await blockedOn(run.run_id, 'cp-production')

    // C answered cp-staging too; its resume lands now
    const late = await rejectsWith(C.resume(run.run_id, { approve: true, by: 'C' }, { checkpointId: 'cp-staging' }), 'INVALID_TRANSITION')
    expect(late.details).toMatchObject({ reason: 'checkpoint_mismatch', checkpoint_id: 'cp-staging', open_checkpoint_id: 'cp-production', state: 'blocked' })
    // A retries its own resume, not knowing whether the first one was committed
    const retry = await rejectsWith(A.resume(run.run_id, { approve: true, by: 'A' }, { checkpointId: 'cp-staging' }), 'INVALID_TRANSITION')
    expect(retry.details).toMatchObject({ reason: 'checkpoint_mismatch', open_checkpoint_id: 'cp-production' })

    const after = await B.runs.getRun(run.run_id)
    expect(after).toMatchObject({ state: 'blocked', checkpoint_id: 'cp-production', last_seq: blocked.last_seq })
    expect((await resumes(run.run_id)).map(p => p.checkpoint_id)).toEqual(['cp-staging'])

    // the answer to cp-production, named so, resolves it
    await C.resume(run.run_id, { approve: false, by: 'C' }, { checkpointId: 'cp-production' })
    await until(async () => (await B.runs.getRun(run.run_id)).state === 'completed', 'the run to complete')
    expect((await B.runs.getRun(run.run_id)).output).toEqual({ staging: { approve: true, by: 'A' }, production: { approve: false, by: 'C' } })
    expect((await resumes(run.run_id)).map(p => [p.checkpoint_id, p.by])).toEqual([['cp-staging', A.agentId], ['cp-production', C.agentId]])
  })

  it('a resume that names no checkpoint resolves whichever is open, as before', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'resume-cp-unnamed', capability: TWICE, input: {}, authorized: [C.agentId] })
    await blockedOn(run.run_id, 'cp-staging')
    await A.resume(run.run_id, { n: 1 })
    await blockedOn(run.run_id, 'cp-production')
    await C.resume(run.run_id, { n: 2 })
    await until(async () => (await B.runs.getRun(run.run_id)).state === 'completed', 'the run to complete')
    expect((await B.runs.getRun(run.run_id)).output).toEqual({ staging: { n: 1 }, production: { n: 2 } })
  })

  it('an answer to a checkpoint already resolved, on a run that works on: checkpoint_mismatch, no open checkpoint', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'resume-cp-running', capability: ONCE, input: {} })
    await blockedOn(run.run_id, 'cp-once')
    await A.resume(run.run_id, { go: true }, { checkpointId: 'cp-once' })
    const running = await B.runs.getRun(run.run_id)
    expect(running.state).toBe('running')
    const retry = await rejectsWith(A.resume(run.run_id, { go: true }, { checkpointId: 'cp-once' }), 'INVALID_TRANSITION')
    expect(retry.details).toMatchObject({ reason: 'checkpoint_mismatch', checkpoint_id: 'cp-once', open_checkpoint_id: null, state: 'running' })
    expect((await B.runs.getRun(run.run_id)).last_seq).toBe(running.last_seq)
    gates.get('resume-cp-running').resolve()
    await until(async () => (await B.runs.getRun(run.run_id)).state === 'completed', 'the run to complete')
    expect((await B.runs.getRun(run.run_id)).output).toEqual({ answer: { go: true } })
  })

  it('a stranger naming the open checkpoint is still UNAUTHORIZED, and a bad checkpoint id INVALID_REQUEST', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'resume-cp-stranger', capability: ONCE, input: {} })
    await blockedOn(run.run_id, 'cp-once')
    await rejectsWith(C.resume(run.run_id, { go: true }, { checkpointId: 'cp-once' }), 'UNAUTHORIZED')
    await rejectsWith(A.resume(run.run_id, { go: true }, { checkpointId: '' }), 'INVALID_REQUEST')
    await rejectsWith(A.resume(run.run_id, { go: true }, { checkpointId: 'x'.repeat(129) }), 'INVALID_REQUEST')
    expect((await B.runs.getRun(run.run_id)).state).toBe('blocked')
    await A.resume(run.run_id, { go: true }, { checkpointId: 'cp-once' })
    gates.get('resume-cp-stranger').resolve()
    await until(async () => (await B.runs.getRun(run.run_id)).state === 'completed', 'the run to complete')
  })
})
