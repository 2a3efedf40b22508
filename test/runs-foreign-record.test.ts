/**
 * A stranger's get_run answer that names this node the run's delegator makes no "delegated by me" record
 * here. Before, RunCaller.control noted any such answer as an outgoing record (noteOutgoing created it when
 * none existed): the run was listed as delegated, liveness watched it for good, and when the stranger then
 * answered RUN_NOT_FOUND this node signed an EXECUTOR_LOST verdict on another agent's run.
 * Routes: a handoff receiver asking the sender about an unconfirmed handoff (confirmations.ts ask ->
 * getRemoteRun), and any local getRun of a stranger's run id.
 */
import type { PrivateKey } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { Run } from '../src/runlog/types.ts'
import { phaseOneHandoff } from './fixtures/raw-handoff.ts'
import { heldRun, holdingWorkers, startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:runs-foreign-record', version: '1.0.0' }

describe('records a stranger would make a node keep as its own delegated runs', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  let bKey: PrivateKey
  const held = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    bKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(3, { nodeOptions: i => ({ handoffConfirmTimeoutMs: 500, ...(i === 1 ? { privateKey: bKey } : {}) }) })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    await holdingWorkers([B, C], WORK, held)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  it('a handoff sender that lies in its get_run answer does not make the receiver record or watch the run', async () => {
    const runId = await heldRun(A, B, WORK, 'task-runs-foreign', held)
    const real = await B.runs.getRun(runId)
    expect(real.delegator).toBe(A.agentId)
    // B (hostile) answers get_run about its run naming C as the delegator
    const ex = (B.runs as unknown as { executor: { localRun: (id: string) => Promise<Run> } }).executor
    const orig = ex.localRun.bind(ex)
    ex.localRun = async (id: string) => {
      const r = await orig(id)
      return id === runId ? { ...r, delegator: C.agentId, authorized: [] } : r
    }
    const watchedBefore = C.runs.liveness.watching.runs
    expect(await C.runs.store.getOutgoing(runId)).toBeUndefined()
    // phase one only: C holds an unconfirmed successor and, after its timeout, asks B about the predecessor
    const res = await phaseOneHandoff(B, bKey, C, real)
    expect(res.ok).toBe(true)
    await until(() => C.runs.handoffConfirmations.failed >= 1, 'C to ask B and fail its successor', 15_000)
    // C asked B and took its answer for what it is: no record, no listing, nothing watched
    const rec = await C.runs.store.getOutgoing(runId)
    const listed = (await C.runs.list({ side: 'delegated' })).delegated.map(r => r.run_id)
    const watched = C.runs.liveness.watching.runs
    expect({ rec: rec === undefined, listed: listed.includes(runId), watched: watched > watchedBefore })
      .toEqual({ rec: true, listed: false, watched: false })
  })

  it('a local getRun of a stranger\'s run records nothing either', async () => {
    const runId = await heldRun(A, B, WORK, 'task-runs-foreign-2', held)
    const ex = (B.runs as unknown as { executor: { localRun: (id: string) => Promise<Run> } }).executor
    const orig = ex.localRun.bind(ex)
    ex.localRun = async (id: string) => {
      const r = await orig(id)
      return id === runId ? { ...r, delegator: C.agentId, authorized: [] } : r
    }
    expect((await C.runs.getRun(runId)).delegator).toBe(C.agentId)
    expect(await C.runs.store.getOutgoing(runId)).toBeUndefined()
    expect((await C.runs.list({ side: 'delegated' })).delegated.map(r => r.run_id)).not.toContain(runId)
  })
})
