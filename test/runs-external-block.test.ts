/**
 * A block raised by someone other than the executing agent: the delegator,
 * or an agent the delegator authorized (how an L2 `checkpoint.raise` reaches
 * a run). Real nodes on the memory transport: A delegates, B executes with an
 * in-process handler, C is authorized on some runs, D is a stranger.
 *
 * What must hold: the handler is told at once (ctx.blocked, onBlocked,
 * untilResumed); an output it returns while blocked completes the run after
 * the resume (or is dropped when the run is canceled meanwhile); calls made
 * while blocked wait for the resume; the handler is never invoked twice.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import type { OpenCheckpoint, ResolvedCheckpoint, RunContext } from '../src/runs/types.ts'
import { nextEvent, rejectsWith, startMesh, stopAll } from './helpers.ts'

const CAP = { capability_id: 'cap:external-block', version: '1.0.0' }

/** What the test does with one run's handler: it steps the handler through gates it opens. */
interface Script {
  calls: number
  ctx?: RunContext
  started: PromiseWithResolvers<void>
  /** Opened by the test: the handler goes on to `body`. */
  go: PromiseWithResolvers<void>
  told: OpenCheckpoint[]
  resumed: ResolvedCheckpoint[]
  body: (ctx: RunContext) => Promise<Record<string, unknown> | undefined>
  returned: PromiseWithResolvers<void>
}

function script (body: Script['body']): Script {
  return {
    calls: 0,
    started: Promise.withResolvers(),
    go: Promise.withResolvers(),
    told: [],
    resumed: [],
    body,
    returned: Promise.withResolvers()
  }
}

describe('external block of a run with an in-process handler', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode, D: MeshNode
  const scripts = new Map<string, Script>()
  let task = 0

  beforeAll(async () => {
    nodes = await startMesh(4, { bootstrapOf: i => i - 1 })
    ;[A, B, C, D] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    B.runs.handle(CAP, async (ctx) => {
      const s = scripts.get(ctx.run.correlation_id)
      if (s === undefined) throw new Error(`no script for ${ctx.run.correlation_id}`)
      s.calls++
      s.ctx = ctx
      ctx.onBlocked(cp => { s.told.push(cp) })
      ctx.onResumed(r => { s.resumed.push(r) })
      s.started.resolve()
      await s.go.promise
      try {
        return await s.body(ctx)
      } finally {
        s.returned.resolve()
      }
    })
    await B.publishCard({ name: 'worker-b', capabilities: [CAP] })
  })
  afterAll(async () => { await stopAll(nodes) })

  async function start (s: Script, authorized: string[] = []): Promise<string> {
    const taskId = `xb-${++task}`
    scripts.set(taskId, s)
    const run = await A.delegate({ to_agent: B.agentId, task_id: taskId, capability: CAP, input: { n: task }, authorized })
    await s.started.promise
    return run.run_id
  }

  /** Block as `by`; resolves once B committed it and the handler was told. */
  async function blockAs (by: MeshNode, s: Script, runId: string, checkpointId: string): Promise<void> {
    const told = nextEvent(B, e => e.run_id === runId && e.type === 'run.blocked')
    const run = await by.block(runId, `review by ${by === A ? 'delegator' : 'authorized'}`, checkpointId)
    expect(run.state).toBe('blocked')
    await told
    // told at once: the listener ran before the block was announced, and the state is visible
    expect(s.told.at(-1)).toEqual({ checkpoint_id: checkpointId, reason: run.block_reason, by: by.agentId })
    expect(s.ctx?.blocked).toEqual({ checkpoint_id: checkpointId, reason: run.block_reason, by: by.agentId })
  }

  async function eventsOf (runId: string): Promise<AgentEvent[]> {
    const out: AgentEvent[] = []
    for (let seq = 1; ; seq++) {
      const e = await B.runs.store.log.get(runId, seq)
      if (e === undefined) return out
      out.push(e)
    }
  }

  it('the delegator blocks; the handler returns while blocked: its output completes the run after the resume, and it runs once', async () => {
    const s = script(async () => ({ answer: 42 }))
    const runId = await start(s)
    await blockAs(A, s, runId, 'cp-delegator')
    s.go.resolve()
    await s.returned.promise
    // the output is held, not dropped: the run waits on its checkpoint
    const held = await A.getRun(runId)
    expect(held).toMatchObject({ state: 'blocked', output: null, checkpoint_id: 'cp-delegator' })

    const completed = nextEvent(B, e => e.run_id === runId && e.type === 'run.completed')
    expect((await A.resume(runId, { approved: true })).state).toBe('running')
    expect((await completed).payload).toEqual({ output: { answer: 42 } })
    expect(await A.getRun(runId)).toMatchObject({ state: 'completed', output: { answer: 42 } })
    expect(s.resumed).toEqual([{ checkpoint_id: 'cp-delegator', resolution: { approved: true }, by: A.agentId }])
    expect(s.ctx?.blocked).toBeNull()
    expect((await eventsOf(runId)).map(e => e.type)).toEqual(['run.started', 'run.blocked', 'run.progress', 'run.completed'])

    // a later run on the same node finishes: any second start of the first handler would have happened by now
    const later = script(async () => ({ later: true }))
    const laterId = await start(later)
    const laterDone = nextEvent(B, e => e.run_id === laterId && e.type === 'run.completed')
    later.go.resolve()
    await laterDone
    expect(s.calls).toBe(1)
    expect(later.calls).toBe(1)
  })

  it('an authorized agent blocks; the running handler waits with untilResumed, its progress waits too, and it is not started again', async () => {
    const s = script(async (ctx) => {
      const resolved = await ctx.untilResumed()
      await ctx.progress({ phase: 'after review', decision: resolved?.resolution.decision })
      return { reviewed_by: resolved?.by }
    })
    const runId = await start(s, [C.agentId])
    // a stranger may not raise a checkpoint on the run
    await rejectsWith(D.block(runId, 'not mine', 'cp-x'), 'UNAUTHORIZED')
    await blockAs(C, s, runId, 'cp-authorized')
    s.go.resolve()
    // progress made while blocked waits for the resume
    const progressed = nextEvent(B, e => e.run_id === runId && e.type === 'run.progress' && e.payload.phase === 'after review')
    const completed = nextEvent(B, e => e.run_id === runId && e.type === 'run.completed')
    expect((await C.resume(runId, { decision: 'go' })).state).toBe('running')
    expect((await progressed).payload).toEqual({ phase: 'after review', decision: 'go' })
    expect((await completed).payload).toEqual({ output: { reviewed_by: C.agentId } })
    expect(s.resumed).toEqual([{ checkpoint_id: 'cp-authorized', resolution: { decision: 'go' }, by: C.agentId }])
    expect((await eventsOf(runId)).map(e => [e.type, e.payload.transition ?? e.payload.phase ?? null])).toEqual([
      ['run.started', null], ['run.blocked', null], ['run.progress', 'resume'], ['run.progress', 'after review'], ['run.completed', null]
    ])
    expect(s.calls).toBe(1)
  })

  it('the handler blocks on its own checkpoint after an external one: its block waits for the first resume and gets only its own resolution', async () => {
    let own: Record<string, unknown> | undefined
    const s = script(async (ctx) => {
      own = await ctx.block('handler asks', 'cp-own')
      return { own }
    })
    const runId = await start(s)
    await blockAs(A, s, runId, 'cp-first')
    s.go.resolve()
    const ownBlock = nextEvent(B, e => e.run_id === runId && e.type === 'run.blocked' && e.payload.checkpoint_id === 'cp-own')
    await A.resume(runId, { for: 'first' })
    expect((await ownBlock).payload.by).toBe(B.agentId)
    expect(s.ctx?.blocked).toEqual({ checkpoint_id: 'cp-own', reason: 'handler asks', by: B.agentId })
    expect(own).toBeUndefined()
    const completed = nextEvent(B, e => e.run_id === runId && e.type === 'run.completed')
    await A.resume(runId, { for: 'own' })
    expect((await completed).payload).toEqual({ output: { own: { for: 'own' } } })
    expect(s.told.map(t => t.checkpoint_id)).toEqual(['cp-first', 'cp-own'])
    expect(s.calls).toBe(1)
  })

  it('a run canceled while its handler holds an output ends canceled; the output is dropped and the handler is not called again', async () => {
    const s = script(async () => ({ too: 'late' }))
    const runId = await start(s, [C.agentId])
    await blockAs(C, s, runId, 'cp-cancel')
    s.go.resolve()
    await s.returned.promise
    const failed = nextEvent(B, e => e.run_id === runId && e.type === 'run.failed')
    await A.cancel(runId, 'no longer needed')
    expect((await failed).payload).toMatchObject({ reason: 'canceled', by: A.agentId })
    expect(await A.getRun(runId)).toMatchObject({ state: 'failed', output: null, failure: { code: 'CANCELED' } })
    // the handler's signal told it, and untilResumed refuses to wait on an ended run
    expect(s.ctx?.signal.aborted).toBe(true)
    expect(await s.ctx?.untilResumed()).toBeNull()
    expect((await eventsOf(runId)).map(e => e.type)).toEqual(['run.started', 'run.blocked', 'run.failed'])
    expect(s.calls).toBe(1)
  })

  it('a block and resume sent as soon as the handle is back (the handler may not have started yet) start the handler once', async () => {
    const s = script(async (ctx) => ({ saw_block: ctx.blocked?.checkpoint_id ?? null }))
    s.go.resolve()
    const taskId = `xb-${++task}`
    scripts.set(taskId, s)
    const run = await A.delegate({ to_agent: B.agentId, task_id: taskId, capability: CAP, input: {} })
    const completed = nextEvent(B, e => e.run_id === run.run_id && e.type === 'run.completed')
    // the block may land before the handler's first turn, or after it returned (then its output is held)
    await A.block(run.run_id, 'at once', 'cp-early')
    await A.resume(run.run_id, { early: true })
    await completed
    const later = script(async () => ({}))
    const laterId = await start(later)
    const laterDone = nextEvent(B, e => e.run_id === laterId && e.type === 'run.completed')
    later.go.resolve()
    await laterDone
    expect(s.calls).toBe(1)
    expect((await A.getRun(run.run_id)).state).toBe('completed')
  })

  it('untilResumed rejects when the run is canceled while blocked', async () => {
    let rejection: unknown
    const s = script(async (ctx) => {
      try {
        await ctx.untilResumed()
      } catch (err) {
        rejection = err
        throw err
      }
      return {}
    })
    const runId = await start(s, [C.agentId])
    await blockAs(A, s, runId, 'cp-wait')
    s.go.resolve()
    await C.cancel(runId, 'dropped by coordinator')
    await s.returned.promise
    expect(rejection).toBeInstanceOf(Error)
    expect(await A.getRun(runId)).toMatchObject({ state: 'failed', failure: { code: 'CANCELED' } })
    expect(s.calls).toBe(1)
  })
})
