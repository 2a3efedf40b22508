/**
 * Idempotent delegation: a retry with the same idempotency_key returns the
 * run the first request created and creates no second one, whether the retry
 * is sequential, concurrent, after completion, or after the first call gave
 * up waiting. Keys belong to the (authenticated) delegator.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { nextEvent, rejectsWith, startMesh, stopAll } from './helpers.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }

describe('idempotent delegation', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  /** How many times B's handler started, per correlation. */
  const started = new Map<string, number>()

  beforeAll(async () => {
    nodes = await startMesh(3, { bootstrapOf: i => i - 1 })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(REVIEW, async (ctx) => {
      started.set(ctx.run.correlation_id, (started.get(ctx.run.correlation_id) ?? 0) + 1)
      if (ctx.input.block === true) return { resolution: await ctx.block('look', 'cp-idem') }
      return { n: ctx.input.n ?? null }
    })
    await B.publishCard({ name: 'b', capabilities: [REVIEW] })
  })
  afterAll(async () => { await stopAll(nodes) })

  const runsOf = async (taskId: string): Promise<string[]> =>
    (await B.runs.list({ correlation_id: taskId })).executing.map(r => r.run_id)

  it('a sequential retry returns the same run, and the executor holds one run and ran the handler once', async () => {
    const req = { to_agent: B.agentId, task_id: 'task-idem-seq', capability: REVIEW, input: { block: true }, idempotency_key: 'key-seq' }
    const blocked = nextEvent(B, e => e.type === 'run.blocked' && e.correlation_id === 'task-idem-seq')
    const first = await A.delegate(req)
    await blocked
    const second = await A.delegate(req)
    expect(second.run_id).toBe(first.run_id)
    // the retry sees the run as it is now
    expect(second.state).toBe('blocked')
    expect(await runsOf('task-idem-seq')).toEqual([first.run_id])
    const done = nextEvent(B, e => e.type === 'run.completed' && e.run_id === first.run_id)
    await A.resume(first.run_id, { ok: true })
    await done
    // after completion too
    const third = await A.delegate(req)
    expect(third.run_id).toBe(first.run_id)
    expect(third.state).toBe('completed')
    expect(await runsOf('task-idem-seq')).toEqual([first.run_id])
    expect(started.get('task-idem-seq')).toBe(1)
  })

  it('concurrent retries of one key create one run', async () => {
    const req = { to_agent: B.agentId, task_id: 'task-idem-burst', capability: REVIEW, input: { n: 1 }, idempotency_key: 'key-burst' }
    const done = nextEvent(B, e => e.type === 'run.completed' && e.correlation_id === 'task-idem-burst')
    const runs = await Promise.all(Array.from({ length: 8 }, async () => A.delegate(req)))
    expect(new Set(runs.map(r => r.run_id)).size).toBe(1)
    expect(await runsOf('task-idem-burst')).toEqual([runs[0]!.run_id])
    expect((await done).run_id).toBe(runs[0]!.run_id)
    expect((await A.getRun(runs[0]!.run_id)).state).toBe('completed')
    expect(started.get('task-idem-burst')).toBe(1)
  })

  it('reusing a key for a different delegation is refused, and creates nothing', async () => {
    const first = await A.delegate({ to_agent: B.agentId, task_id: 'task-idem-x', capability: REVIEW, input: {}, idempotency_key: 'key-reused' })
    const err = await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-idem-y', capability: REVIEW, input: {}, idempotency_key: 'key-reused' }), 'INVALID_REQUEST')
    expect(err.details).toMatchObject({ reason: 'idempotency_conflict', run_id: first.run_id })
    expect(await runsOf('task-idem-y')).toEqual([])
  })

  it('keys belong to the delegator: the same key from another agent is another run', async () => {
    const req = { to_agent: B.agentId, task_id: 'task-idem-two', capability: REVIEW, input: {}, idempotency_key: 'key-shared' }
    const fromA = await A.delegate(req)
    const fromC = await C.delegate(req)
    expect(fromC.run_id).not.toBe(fromA.run_id)
    expect(fromA.delegator).toBe(A.agentId)
    expect(fromC.delegator).toBe(C.agentId)
    expect((await runsOf('task-idem-two')).sort()).toEqual([fromA.run_id, fromC.run_id].sort())
  })

  it('a delegator that gave up waiting and retries with its key gets the run the first request created, still running', async () => {
    const release = Promise.withResolvers<undefined>()
    const asked = Promise.withResolvers<void>()
    B.runs.setPolicy(async ({ task_id: taskId }) => {
      if (taskId !== 'task-idem-late') return undefined
      asked.resolve()
      return release.promise
    })
    try {
      const req = { to_agent: B.agentId, task_id: 'task-idem-late', capability: REVIEW, input: { block: true }, idempotency_key: 'key-late' }
      const gaveUp = rejectsWith(A.delegate(req, { responseTimeoutMs: 200 }), 'AGENT_NOT_FOUND')
      await asked.promise
      await gaveUp
      const blocked = nextEvent(B, e => e.type === 'run.blocked' && e.correlation_id === 'task-idem-late')
      release.resolve(undefined)
      // the first request's run is created and started (not canceled: the key lets the delegator find it)
      const e = await blocked
      const retry = await A.delegate(req)
      expect(retry.run_id).toBe(e.run_id)
      expect(retry.state).toBe('blocked')
      expect(await runsOf('task-idem-late')).toEqual([e.run_id])
      expect(started.get('task-idem-late')).toBe(1)
    } finally {
      B.runs.setPolicy(undefined)
    }
  })
})
