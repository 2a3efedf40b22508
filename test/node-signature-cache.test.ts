/**
 * Issue #17: every node checks the signatures it is sent with its own cache.
 * Three nodes in one process: the executor's events reach the delegator and a
 * bystander; each of the two checks them with Ed25519 itself (its own cache
 * counts the checks), and the process's shared cache is never used.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { processSignatures } from '../src/runlog/event.ts'
import { collect } from './events-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:own-cache', version: '1.0.0' }
const TASK = 'task-own-cache'
const PROGRESS = 5

describe('each node its own signature cache', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => { nodes = await startMesh(3) })
  afterAll(async () => { await stopAll(nodes) })

  it('delegator and bystander each verify the run\'s events themselves, replay included; nothing goes through the process cache', async () => {
    const [D, E, B] = nodes as [MeshNode, MeshNode, MeshNode]
    expect(new Set(nodes.map(n => n.signatures)).size).toBe(3)
    E.runs.handle(WORK, async (ctx) => {
      for (let i = 1; i <= PROGRESS; i++) await ctx.progress({ i })
      return { ok: true }
    })
    await E.publishCard({ name: 'own-cache-executor', capabilities: [WORK] })
    const processBefore = { ...processSignatures.stats }
    const before = nodes.map(n => ({ ...n.signatures.stats }))
    const onB = await collect(B, TASK, { participants: [D.agentId, E.agentId] })
    await D.delegate({ to_agent: E.agentId, task_id: TASK, capability: WORK, input: {} })
    await until(async () => (await D.runs.list({ correlation_id: TASK })).delegated[0]?.state === 'completed', 'the delegator\'s record to show the completion')
    await onB.until(es => es.some(e => e.type === 'run.completed'), 'the bystander to see the run end')
    onB.sub.close()
    // an audit replay judges the runs' tickets (lineage) with the node's cache too
    const replay = await B.events.replay(TASK, { owner: D.agentId })
    expect(replay.events.some(e => e.type === 'run.completed')).toBe(true)
    const checked = nodes.map((n, i) => n.signatures.stats.checked - (before[i]?.checked ?? 0))
    // run.started (its ticket too, on the executor), PROGRESS progress events and run.completed
    expect(checked[0]).toBeGreaterThanOrEqual(PROGRESS + 2) // the delegator
    expect(checked[2]).toBeGreaterThanOrEqual(PROGRESS + 2) // the bystander
    expect(checked[1]).toBeGreaterThanOrEqual(1) // the executor checked the delegator's ticket
    expect(nodes.every(n => n.signatures.stats.refused === 0)).toBe(true)
    expect(processSignatures.stats).toEqual(processBefore)
  })
})
