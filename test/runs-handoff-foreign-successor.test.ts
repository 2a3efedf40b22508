/**
 * A lying executor makes its delegator take somebody else's run for the
 * successor of a run it delegated. B executes A's run P and signs a handoff
 * of P naming Q, a run X delegated to C (B never asked C for anything). A
 * asks C about Q, and C answers truthfully: Q continues no handoff and its
 * delegator is X. That answer is a refusal, not an executor out of reach:
 * A keeps no record of Q. And a record of a successor kept from the link
 * alone (its executor was not reached at the time) ends once the executor
 * answers with a run that is not A's, instead of being watched for good.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { Actor, RunCommand } from '../src/runs/types.ts'
import type { Run } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:foreign-successor', version: '1.0.0' }

interface ExecutorInside { apply: (runId: string, command: RunCommand, actor: Actor) => Promise<Run> }
interface CallerInside { holdSuccessor: (pred: Run) => Promise<Run | undefined> }

describe('a handoff that names another delegator\'s run', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode, X: MeshNode
  const gates = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    nodes = await startMesh(4, { bootstrapOf: () => 0, nodeOptions: () => ({ liveness: { lostAfterMs: 1_000, probeIntervalMs: 200 } }) })
    ;[A, B, C, X] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    for (const n of [B, C]) {
      n.runs.handle(WORK, async (ctx) => {
        const gate = Promise.withResolvers<void>()
        gates.set(ctx.run.run_id, gate)
        await Promise.race([gate.promise, new Promise(resolve => { ctx.signal.addEventListener('abort', resolve, { once: true }) })])
        return { ok: true }
      })
      await n.publishCard({ name: 'worker', capabilities: [WORK] })
    }
  }, 60_000)
  afterAll(async () => {
    for (const g of gates.values()) g.resolve()
    await stopAll(nodes)
  })

  it('is refused by the delegator, and a record held from such a link ends once the executor answers', async () => {
    const P = await A.delegate({ to_agent: B.agentId, task_id: 'task-a', capability: WORK, input: {} })
    const Q = await X.delegate({ to_agent: C.agentId, task_id: 'task-x', capability: WORK, input: {} })
    await until(() => gates.has(P.run_id) && gates.has(Q.run_id), 'both runs to start')

    // B (hostile) signs a handoff of P naming X's run on C: its own log, its own signature
    const inside = (B.runs as unknown as { executor: ExecutorInside }).executor
    await inside.apply(P.run_id, { type: 'handoff', to: { run_id: Q.run_id, agent_id: C.agentId } }, { role: 'executor' })
    await A.getRun(P.run_id)
    await until(async () => (await A.runs.store.getOutgoing(P.run_id))?.handoff_to?.run_id === Q.run_id, 'A\'s record of P to name Q')
    // C answered A's ask about Q with X's run: a refusal, so nothing of Q is recorded at A
    await until(() => A.runs.successorStats.refused >= 1, 'A to refuse the successor')
    expect(A.runs.successorStats.held).toBe(0)
    expect(await A.runs.store.getOutgoing(Q.run_id)).toBeUndefined()

    // a record of Q kept from the link alone (as when C could not be asked at the time) is watched,
    // and C's first answer (X's run, not A's) ends it
    const pred = await A.runs.store.getOutgoing(P.run_id)
    const caller = (A.runs as unknown as { caller: CallerInside }).caller
    const held = await caller.holdSuccessor(pred as Run)
    expect(held).toMatchObject({ run_id: Q.run_id, state: 'running', delegator: A.agentId })
    await until(async () => (await A.runs.store.getOutgoing(Q.run_id))?.state === 'failed', 'A\'s record of Q to end', 15_000)
    expect(A.runs.liveness.stats.disowned).toBeGreaterThanOrEqual(1)
    await until(() => A.runs.liveness.watching.runs === 0, 'liveness to stop watching Q')
    // X's run at C is untouched: A is not its delegator
    expect((await C.runs.getRun(Q.run_id)).state).toBe('running')
  }, 90_000)
})
