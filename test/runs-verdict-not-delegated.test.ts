/**
 * A delegator never signs a liveness verdict on a run it did not delegate
 * (found by session 57's review). B, executing D's run R, signs a handoff of
 * R naming X:r, a run E delegated to X inside D's task; X is gone, so D
 * keeps a record of X:r from the link alone. D held X:r's run.started (it
 * follows its task) and, once X had been out of reach long enough, signed
 * and published a verdict ending X:r: a forgery to every peer (its ticket
 * names E), published by an honest node. Now the record ends with no
 * verdict, as one with nothing held to chain it to.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { Actor, RunCommand } from '../src/runs/types.ts'
import type { Run } from '../src/runlog/types.ts'
import { ticketOf } from '../src/runlog/ticket.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const ROOT = { capability_id: 'cap:verdict-root', version: '1.0.0' }
const SUB = { capability_id: 'cap:verdict-sub', version: '1.0.0' }
const TASK = 'task-verdict-not-delegated'

interface ExecutorInside { apply: (runId: string, command: RunCommand, actor: Actor) => Promise<Run> }

describe('a record of another delegator\'s run, kept from a hostile executor\'s handoff link', () => {
  let nodes: MeshNode[] = []
  let D: MeshNode, E: MeshNode, B: MeshNode, X: MeshNode
  const held: Array<PromiseWithResolvers<void>> = []
  const hold = async (signal: AbortSignal): Promise<void> => {
    const gate = Promise.withResolvers<void>()
    held.push(gate)
    await Promise.race([gate.promise, new Promise(resolve => { signal.addEventListener('abort', resolve, { once: true }) })])
  }
  let child: string | undefined

  beforeAll(async () => {
    nodes = await startMesh(4, { nodeOptions: i => i === 0 ? { liveness: { lostAfterMs: 1_000, probeIntervalMs: 200 } } : {} })
    ;[D, E, B, X] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    X.runs.handle(SUB, async (ctx) => { await hold(ctx.signal); return { ok: true } })
    await X.publishCard({ name: 'sub', capabilities: [SUB] })
    E.runs.handle(ROOT, async (ctx) => {
      child = (await E.delegate({ to_agent: X.agentId, task_id: ctx.run.correlation_id, capability: SUB, input: {}, parent_run: ctx.run.run_id })).run_id
      await hold(ctx.signal)
      return { ok: true }
    })
    B.runs.handle(ROOT, async (ctx) => { await hold(ctx.signal); return { ok: true } })
    for (const n of [E, B]) await n.publishCard({ name: 'root', capabilities: [ROOT] })
  }, 60_000)
  afterAll(async () => {
    for (const g of held) g.resolve()
    await stopAll(nodes.filter(n => n !== X))
  })

  it('ends with no verdict signed or published by this node', async () => {
    await D.delegate({ to_agent: E.agentId, task_id: TASK, capability: ROOT, input: {} })
    await until(() => child !== undefined, 'E to delegate the sub-run to X')
    const sub = child!
    // D follows its task: it holds the sub-run's start, whose ticket names E as the delegator
    await until(async () => (await D.runs.store.log.get(sub, 1)) !== undefined, 'D to hold the sub-run\'s start')
    expect(ticketOf((await D.runs.store.log.get(sub, 1))!)?.delegator).toBe(E.agentId)
    const R = await D.delegate({ to_agent: B.agentId, task_id: TASK, capability: ROOT, input: {} })

    // X goes; B (hostile) signs a handoff of R naming X's run: its own log, its own signature
    await X.stop()
    const inside = (B.runs as unknown as { executor: ExecutorInside }).executor
    await inside.apply(R.run_id, { type: 'handoff', to: { run_id: sub, agent_id: X.agentId } }, { role: 'executor' })
    await D.getRun(R.run_id)
    await until(async () => (await D.runs.store.getOutgoing(sub))?.state === 'failed', 'D\'s record of the sub-run to end', 30_000)

    // before: a verdict declared_by D, published, and E counted D's forgery
    expect(await D.runs.store.getVerdict(sub)).toBeUndefined()
    expect(D.runs.liveness.stats.notDelegated).toBeGreaterThanOrEqual(1)
    expect(E.events.stats.gossip.forged_verdict ?? 0).toBe(0)
  }, 90_000)
})
