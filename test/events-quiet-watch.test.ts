/**
 * A subscriber recovers by sync the runs whose every gossip copy it lost
 * also once no run it knows may still move (protocols/events.md, Tails): the
 * last live run's end, and a participant's join, open a quiet watch
 * (EVENTS_QUIET_WATCH_MS) in which the tail's rounds go on asking the
 * participants. Before, the tail timer stopped with the last live run, so a
 * sub-delegation whose copies were lost, or the task's next step, was never
 * fetched (found by session 51's review of the events recovery paths).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { loseGossip } from './fixtures/lose-gossip.ts'

const ROOT = { capability_id: 'cap:quiet-root', version: '1.0.0' }
const SUB = { capability_id: 'cap:quiet-sub', version: '1.0.0' }
const STEP = { capability_id: 'cap:quiet-step', version: '1.0.0' }
/** Within the watch: the rounds after a run's end come EVENTS_TAIL_SYNC_FOLLOW_MS apart and more. */
const RECOVERY_MS = 45_000

describe('a subscriber with no live run left', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode, E: MeshNode
  const subRuns = new Map<string, string>()

  beforeAll(async () => {
    nodes = await startMesh(4)
    ;[A, B, C, E] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    C.runs.handle(SUB, async () => ({ sub: true }))
    C.runs.handle(STEP, async () => ({ step: true }))
    await C.publishCard({ name: 'quiet-sub', capabilities: [SUB, STEP] })
    // the root run delegates a sub-run, reports progress (which hides the sub-run's start from the join sync),
    // and ends once the sub-run has
    B.runs.handle(ROOT, async (ctx) => {
      const s = await B.delegate({ to_agent: C.agentId, task_id: ctx.run.correlation_id, capability: SUB, input: {}, parent_run: ctx.run.run_id })
      subRuns.set(ctx.run.run_id, s.run_id)
      await ctx.progress({ waiting_on: 'a sub-task' })
      await until(async () => (await B.events.lastEvent(s.run_id))?.type === 'run.completed', 'the sub-run to end at its delegator')
      return { root: true }
    })
    await B.publishCard({ name: 'quiet-root', capabilities: [ROOT] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('gets a sub-delegation whose gossip copies it lost, after its root run ended', async () => {
    const task = 'task-quiet-subdelegation'
    const seen: AgentEvent[] = []
    const sub = await E.events.subscribe(task, { owner: A.agentId })
    void (async () => { for await (const e of sub) seen.push(e) })()
    const drop = loseGossip(E, task, e => e.executor === C.agentId)
    const r = await A.delegate({ to_agent: B.agentId, task_id: task, capability: ROOT, input: {} })
    await until(() => seen.some(e => e.run_id === r.run_id && e.type === 'run.completed'), 'the subscriber to hold the root run\'s end')
    const s = subRuns.get(r.run_id)!
    expect(drop.lost).toBeGreaterThan(0)
    await until(() => seen.some(e => e.run_id === s && e.type === 'run.completed'), 'the subscriber to get the sub-run by sync', RECOVERY_MS)
    sub.close()
  })

  it('gets the task\'s next step whose gossip copies it lost, while the owner stays on the topic (no join)', async () => {
    const task = 'task-quiet-next-step'
    const seen: AgentEvent[] = []
    // the owner follows its own task, so its next delegation makes no join a subscriber could sync after
    const own = await A.events.subscribe(task)
    const sub = await E.events.subscribe(task, { owner: A.agentId })
    void (async () => { for await (const e of sub) seen.push(e) })()
    const r1 = await A.delegate({ to_agent: C.agentId, task_id: task, capability: STEP, input: {} })
    await until(() => seen.some(e => e.run_id === r1.run_id && e.type === 'run.completed'), 'the subscriber to hold step 1\'s end')
    const drop = loseGossip(E, task, e => e.executor === C.agentId)
    const r2 = await A.delegate({ to_agent: C.agentId, task_id: task, capability: STEP, input: {} })
    await until(async () => (await A.events.lastEvent(r2.run_id))?.type === 'run.completed', 'the owner to hold step 2\'s end')
    await until(() => drop.lost >= 2, 'the subscriber to lose step 2\'s gossip')
    await until(() => seen.some(e => e.run_id === r2.run_id && e.type === 'run.completed'), 'the subscriber to get step 2 by sync', RECOVERY_MS)
    sub.close()
    own.close()
  })
})
