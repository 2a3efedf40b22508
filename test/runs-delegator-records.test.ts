/**
 * The delegator's own records of its runs: only the run's executor speaks
 * for a run (an answer about another run rewrites nothing), and a run handed
 * off, by the delegator's request or by its executor's handler, brings its
 * successor's record to the delegator, so liveness watches the successor too.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { serve } from '../src/wire/rpc.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:records', version: '1.0.0' }

describe('the delegator\'s records of its runs', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode, E: MeshNode
  const held = new Map<string, PromiseWithResolvers<void>>()
  /** What E answers to every get_run, whatever run it is asked about. */
  let lie: Run | undefined

  beforeAll(async () => {
    nodes = await startMesh(4)
    ;[A, B, C, E] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    for (const n of [B, C]) {
      n.runs.handle(WORK, async (ctx) => {
        // the handler itself hands its run on when the input names a receiver (and this node as the one to do it)
        if (typeof ctx.input.to === 'string' && ctx.input.at === n.agentId) {
          await ctx.handoff(ctx.input.to, { note: 'yours now' })
          return undefined
        }
        const gate = Promise.withResolvers<void>()
        held.set(ctx.run.run_id, gate)
        await Promise.race([gate.promise, new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })])
        return { ok: true }
      })
      await n.publishCard({ name: `worker-${n === B ? 'b' : 'c'}`, capabilities: [WORK] })
    }
    // E answers the control protocol with another executor's run
    await E.host.unhandle(CONTROL_PROTOCOL)
    await serve(E.host, {
      protocol: CONTROL_PROTOCOL,
      maxFrameBytes: CONTROL_MAX_FRAME_BYTES,
      methods: { get_run: { handle: async () => ({ run: lie }) } }
    })
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  it('an executor that answers about another run is refused, and the record of that run stays as it was', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-records-lie', capability: WORK, input: {} })
    await until(() => held.has(run.run_id), 'the run to start')
    const before = await A.runs.store.getOutgoing(run.run_id)
    expect(before?.state).toBe('running')
    lie = { ...before!, state: 'completed', output: { forged: 'by E' }, last_seq: 1_000_000 }
    const err = await rejectsWith(A.runs.getRun(`${E.agentId}:${'0'.repeat(24)}`), 'INVALID_REQUEST')
    expect(err.message).toMatch(/another agent|another run/)
    // the same run under its own executor's name, as E's: still not E's to speak for
    lie = { ...lie, run_id: `${E.agentId}:${'0'.repeat(24)}`, agent_id: E.agentId }
    await rejectsWith(A.runs.getRun(`${E.agentId}:${'1'.repeat(24)}`), 'INVALID_REQUEST')
    expect(await A.runs.store.getOutgoing(run.run_id)).toMatchObject({ state: 'running', output: null, last_seq: before!.last_seq })
    expect(A.runs.liveness.watching.runs).toBeGreaterThanOrEqual(1)
    held.get(run.run_id)?.resolve()
    await until(async () => (await A.runs.store.getOutgoing(run.run_id))?.state === 'completed', 'the honest completion to reach the record')
    expect((await A.runs.store.getOutgoing(run.run_id))?.output).toEqual({ ok: true })
  })

  it('a handoff the delegator asks for records the successor at once, and liveness watches it', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-records-asked', capability: WORK, input: {} })
    await until(() => held.has(run.run_id), 'the run to start')
    const next = await A.handoff(run.run_id, C.agentId, {})
    expect(next.handoff_from?.run_id).toBe(run.run_id)
    expect(await A.runs.store.getOutgoing(next.run_id)).toMatchObject({ run_id: next.run_id, delegator: A.agentId })
    await until(() => held.has(next.run_id), 'the successor to start')
    const live = await A.runs.list({ state: 'running' })
    expect(live.delegated.map(r => r.run_id)).toContain(next.run_id)
    held.get(next.run_id)?.resolve()
    await until(async () => (await A.runs.store.getOutgoing(next.run_id))?.state === 'completed', 'the successor\'s completion to reach the record')
  })

  it('a handoff the executor\'s handler makes brings the successor\'s record to the delegator', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-records-handler', capability: WORK, input: { to: C.agentId, at: B.agentId } })
    // the predecessor's record learns of the handoff from its events; the successor's record follows from it
    await until(async () => (await A.runs.store.getOutgoing(run.run_id))?.handoff_to !== null, 'the predecessor\'s record to name its successor')
    const link = (await A.runs.store.getOutgoing(run.run_id))!.handoff_to!
    await until(async () => await A.runs.store.getOutgoing(link.run_id) !== undefined, 'the successor\'s record at the delegator')
    expect(await A.runs.store.getOutgoing(link.run_id)).toMatchObject({ agent_id: C.agentId, delegator: A.agentId, handoff_from: { run_id: run.run_id } })
    await until(() => held.has(link.run_id), 'the successor to start')
    held.get(link.run_id)?.resolve()
    // followed like the run itself: its completion reaches the record by its events
    await until(async () => (await A.runs.store.getOutgoing(link.run_id))?.state === 'completed', 'the successor\'s completion to reach the record')
  })
})
