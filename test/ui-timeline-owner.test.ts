/**
 * Two delegators start tasks under one task id on the same executor (a
 * stranger may reuse any task id). The replay takes an `owner` to pick one
 * task; found by session 46's review, the view's timeline operation had no
 * such parameter, so the executor's view of that task only ever answered
 * ambiguous_owner. It takes `owner` now, and the ambiguous answer names the
 * owners the view offers to pick from.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:owner', version: '1.0.0' }
const TASK = 'task-ui-shared-id'

describe('timeline of a task id two delegators used', () => {
  let nodes: MeshNode[]
  let A: MeshNode, B: MeshNode, C: MeshNode
  let api: ApiServer
  const token = newToken()

  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(CAP, async () => ({ ok: true }))
    await B.publishCard({ name: 'exec', capabilities: [CAP] })
    api = await startApiServer(B, { token, port: 0 })
  }, 120_000)

  afterAll(async () => {
    await api?.close()
    await stopAll(nodes)
  })

  it('lets the view pick the owner, as the replay does', async () => {
    const ra = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: CAP, input: {} })
    const rc = await C.delegate({ to_agent: B.agentId, task_id: TASK, capability: CAP, input: {} })
    await until(async () => (await B.getRun(ra.run_id)).state === 'completed' && (await B.getRun(rc.run_id)).state === 'completed', 'both runs done')
    const plain = await raw(`${api.url}/v1/events/${TASK}/timeline?timeout_ms=1000`, { token })
    expect(plain.status).toBe(400)
    expect(plain.body.error.details.reason).toBe('ambiguous_owner')
    expect([...plain.body.error.details.owners].sort()).toEqual([A.agentId, C.agentId].sort())
    const replay = await raw(`${api.url}/v1/events/${TASK}/replay?timeout_ms=1000&owner=${A.agentId}`, { token })
    expect(replay.status).toBe(200)
    expect(replay.body.runs.map((r: any) => r.run_id)).toEqual([ra.run_id])
    const timeline = await raw(`${api.url}/v1/events/${TASK}/timeline?timeout_ms=1000&owner=${A.agentId}`, { token })
    expect(timeline.status).toBe(200)
    expect(timeline.body.replay.runs.map((r: any) => r.run_id)).toEqual([ra.run_id])
    expect(timeline.body.verdicts.map((v: any) => v.signature)).not.toContain('invalid')
  }, 120_000)

  // session 56's review of the view: while the executor followed the id (a subscription naming no owner), the first
  // root run judged there made its task the owner's, and a replay naming none answered with whichever that was
  // (after the track was made again, the stranger's), where the spec (lineage.md, Owners) says ambiguous_owner
  it('answers ambiguous_owner while the executor follows the id with an owner only judged there', async () => {
    const task = `${TASK}-followed`
    const sub = await B.events.subscribe(task, { onEvent: () => {} })
    try {
      const ra = await A.delegate({ to_agent: B.agentId, task_id: task, capability: CAP, input: {} })
      const rc = await C.delegate({ to_agent: B.agentId, task_id: task, capability: CAP, input: {} })
      await until(async () => (await B.getRun(ra.run_id)).state === 'completed' && (await B.getRun(rc.run_id)).state === 'completed', 'both runs done')
      const plain = await raw(`${api.url}/v1/events/${task}/replay?timeout_ms=1000`, { token })
      expect(plain.status).toBe(400)
      expect(plain.body.error.details.reason).toBe('ambiguous_owner')
      expect([...plain.body.error.details.owners].sort()).toEqual([A.agentId, C.agentId].sort())
    } finally {
      sub.close()
    }
  }, 120_000)

  // the review of that change: a delegator replaying its own task once its runs ended (its track gone) got
  // ambiguous_owner, though a root run it delegated makes the task its own (lineage.md, Owners)
  it('answers a delegator\'s replay naming no owner with its own task, also after its runs ended', async () => {
    const task = `${TASK}-own`
    // the stranger's root first: where A's new track takes the first root it judges as the owner, that is C's
    const rc = await C.delegate({ to_agent: B.agentId, task_id: task, capability: CAP, input: {} })
    await until(async () => (await C.getRun(rc.run_id)).state === 'completed', 'the stranger\'s run done')
    const ra = await A.delegate({ to_agent: B.agentId, task_id: task, capability: CAP, input: {} })
    await until(async () => (await A.getRun(ra.run_id)).state === 'completed' && (await C.getRun(rc.run_id)).state === 'completed', 'both runs done')
    // its runs ended, A lets the task's track go: what named A the owner went with it
    const tracks = (A.events as unknown as { correlations: { get: (id: string) => unknown } }).correlations
    await until(() => tracks.get(task) === undefined, 'A to let the ended task\'s track go')
    const replay = await A.events.replay(task, { participants: [B.agentId], timeoutMs: 5_000 })
    expect(replay.owner).toBe(A.agentId)
    expect(replay.runs.map(r => r.run_id)).toEqual([ra.run_id])
  }, 120_000)
})
