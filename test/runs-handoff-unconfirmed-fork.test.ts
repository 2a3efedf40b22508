/**
 * What is refused of a handoff; both were found by session 44's review.
 *
 * A successor its sender has not confirmed is not handed off again
 * (INVALID_TRANSITION handoff_unconfirmed, like block and resume): when the
 * sender never committed (its call timed out after phase one), the
 * delegator's handoff of the unconfirmed successor S to D went through, so D
 * started S2 while the predecessor R still ran on B: two live runs continued
 * one task line, and S2's chain could never be proved (R never named S).
 *
 * A successor goes on with the input its predecessor was started with: the
 * receiver took whatever input the sender put in the request.
 */
import type { PrivateKey } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { holdingWorkers, rejectsWith, startMesh, stopAll, until } from './helpers.ts'
import { phaseOneHandoff } from './fixtures/raw-handoff.ts'

const WORK = { capability_id: 'cap:unconfirmed-fork', version: '1.0.0' }

describe('a receiver refuses a handoff', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode, D: MeshNode
  let bKey: PrivateKey
  const held = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    bKey = await generateKeyPair('Ed25519')
    // a confirm window long enough that C does not fail S on its own during the test
    nodes = await startMesh(4, { nodeOptions: i => ({ handoffConfirmTimeoutMs: 60_000, ...(i === 1 ? { privateKey: bKey } : {}) }) })
    ;[A, B, C, D] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    await holdingWorkers([B, C, D], WORK, held)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  it('of a successor its sender has not confirmed: no second live run of the task line', async () => {
    const task = 'task-unconfirmed-fork'
    const r = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    await until(() => held.has(r.run_id), 'R to start')
    // phase one only (as when B's call timed out after C created the run): S exists on C, unconfirmed
    const answer = await phaseOneHandoff(B, bKey, C, r)
    expect(answer.ok).toBe(true)
    const s = answer.body!.run
    // like block, a handoff of the unconfirmed run is refused, and nothing reaches D
    const err = await rejectsWith(A.handoff(s.run_id, D.agentId, { note: 'on to D' }), 'INVALID_TRANSITION')
    expect(err.details?.reason).toBe('handoff_unconfirmed')
    expect((await D.runs.list()).executing.filter(x => x.correlation_id === task)).toEqual([])
    expect((await C.runs.getRun(s.run_id)).state).toBe('running')
    expect((await B.runs.getRun(r.run_id)).state).toBe('running')
  })

  it('a handoff that carries another input than the run was started with is refused (false_inheritance)', async () => {
    const task = 'task-other-input'
    const r = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: { asked: 'this' } })
    await until(() => held.has(r.run_id), 'R to start')
    const answer = await phaseOneHandoff(B, bKey, C, r, { input: { asked: 'something else' } })
    expect(answer.ok).toBe(false)
    expect(answer.error).toMatchObject({ code: 'UNAUTHORIZED', details: { reason: 'false_inheritance' } })
    expect((await C.runs.list()).executing.filter(x => x.correlation_id === task)).toEqual([])
  })
})
