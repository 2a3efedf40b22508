/**
 * Issue #17, bounded connections: eight real nodes with a budget of three
 * connections each. Discovery dials across the mesh and the budget closes
 * connections to stay under it, while a run (delegated, blocked, resumed,
 * completed), a follower of its correlation and a bystander's replay keep
 * working: the peers a node has live runs with are never pruned.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { RUN_PEER_TAG } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { collect } from './events-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const BOUND = 3
/** Short, so the test sees connections leave their grace; long enough for a card fetch to be answered. */
const GRACE_MS = 1500
const WORK = { capability_id: 'cap:budget-work', version: '1.0.0' }
const TASK = 'task-budget'

describe('a connection budget of three in an eight-node mesh', () => {
  let nodes: MeshNode[] = []

  beforeAll(async () => {
    // a chain (each joins the one before) whose routing tables fill first; then the budget shrinks to
    // three on every node, live, and trims the mesh
    nodes = await startMesh(8, { bootstrapOf: i => i - 1, nodeOptions: () => ({ connectionGraceMs: GRACE_MS }) })
    for (const n of nodes) n.connections.setMax(BOUND)
  })
  afterAll(async () => { await stopAll(nodes) })

  it('runs, follows and replays keep working while the budget prunes every other connection', async () => {
    const [A, B, , , , , D, F] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode, MeshNode, MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      await ctx.progress({ step: 1 })
      const resolution = await ctx.block('a human looks', 'cp-budget')
      return { approved: resolution.ok }
    })
    await B.publishCard({ name: 'budget-worker', capabilities: [WORK] })
    for (const [i, n] of nodes.entries()) if (n !== B) await n.publishCard({ name: `budget-${i}`, capabilities: [] })
    // every node looks the worker up: lookups dial across the mesh, and the budget trims
    for (const n of nodes) {
      if (n === B) continue
      await until(async () => (await n.discover({ capability: WORK })).some(c => c.agent_id === B.agentId), 'the worker found')
    }
    const follower = await collect(D, TASK, { owner: A.agentId, participants: [B.agentId] })
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    await follower.until(es => es.some(e => e.run_id === run.run_id && e.type === 'run.blocked'), 'the follower to see the block')

    // more dialing while the run waits on its checkpoint: each node fetches the cards of nodes across the mesh
    for (const [i, n] of nodes.entries()) {
      for (const step of [3, 4, 5]) {
        const m = nodes[(i + step) % nodes.length]!
        expect((await n.getCard(m.agentId)).agent_id).toBe(m.agentId)
      }
    }
    // the budget closes only connections out of their grace: on a fast machine all the work above can end
    // within it, so the test waits for the first prunes (the run, the follower and the replay go on after them)
    const pruned = (): number => nodes.reduce((sum, n) => sum + n.connections.stats.pruned, 0)
    await until(() => pruned() > 0, 'the budget to prune a connection')
    // the run's two ends keep their connection: it is tagged as carrying a live run
    const tagsAtA = (await A.host.peerStore.get(peerIdOfAgent(B.agentId))).tags
    expect(tagsAtA.has(RUN_PEER_TAG)).toBe(true)
    expect(A.host.getConnections(peerIdOfAgent(B.agentId)).length).toBeGreaterThan(0)

    await A.resume(run.run_id, { ok: true })
    await follower.until(es => es.some(e => e.run_id === run.run_id && e.type === 'run.completed'), 'the follower to see the end')
    expect((await A.getRun(run.run_id)).output).toEqual({ approved: true })
    const replay = await F.events.replay(TASK, { owner: A.agentId, participants: [B.agentId] })
    expect(replay.runs.map(r => [r.run_id, r.state])).toEqual([[run.run_id, 'completed']])
    expect(replay.events.map(e => e.type)).toEqual(['run.started', 'run.progress', 'run.blocked', 'run.progress', 'run.completed'])

    // every node comes back under its budget once its new connections are out of grace, or stays over it
    // only by peers it has live runs with
    const within = async (n: MeshNode): Promise<boolean> => {
      const conns = n.host.getConnections()
      let protectedPeers = 0
      for (const p of new Set(conns.map(c => c.remotePeer.toString()))) {
        if ((await n.host.peerStore.get(peerIdOfAgent(p))).tags.has(RUN_PEER_TAG)) protectedPeers++
      }
      const ok = conns.length <= Math.max(BOUND, protectedPeers)
      return ok
    }
    for (const n of nodes) await until(async () => within(n), `${n.agentId} within its budget`)
  })
})
