/**
 * A delegation policy that never settles (a buggy one that ignores its
 * signal) kept the request's slot, and for a keyed delegation the
 * idempotency key's lock, after the request was answered TIMEOUT: the slot
 * was never given back, every retry of the key queued behind it, the sweep of
 * expired keys stalled, and the node could no longer stop. The wait for the
 * policy now ends at DELEGATION_POLICY_TIMEOUT_FACTOR × the handler timeout
 * (a policy that answers after its request ended is still acted on: the
 * conformance kit's handle-undelivered check relies on it). Found by session
 * 45's delegate review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { rejectsWith, startMesh, until } from './helpers.ts'
import { DELEGATION_POLICY_TIMEOUT_FACTOR } from '../src/runs/constants.ts'

const REVIEW = { capability_id: 'cap:policy-hang', version: '1.0.0' }

describe('a delegation policy that never settles', () => {
  let A: MeshNode, B: MeshNode
  let bStopped = false
  beforeAll(async () => {
    ;[A, B] = await startMesh(2, { nodeOptions: i => i === 1 ? { runHandlerTimeoutMs: 500 } : {} }) as [MeshNode, MeshNode]
    B.runs.handle(REVIEW, async () => ({ ok: true }))
    await B.publishCard({ name: 'b', capabilities: [REVIEW] })
  })
  afterAll(async () => {
    await A.stop()
    if (!bStopped) await B.stop()
  })

  it('after the request is answered TIMEOUT, its slot and key are given back, and the node stops', async () => {
    B.runs.setPolicy(async ({ task_id: t }) => t === 'task-hang' ? new Promise<undefined>(() => {}) : undefined)
    await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-hang', capability: REVIEW, input: {}, idempotency_key: 'k-hang' }), 'TIMEOUT')
    // nothing was created: the slot taken for the request is given back once the policy's wait ends
    await until(() => B.runs.slots.size === 0, 'the slot given back', 500 * DELEGATION_POLICY_TIMEOUT_FACTOR + 5_000)
    // the key is free again: a retry is asked of the policy once more (and times out the same way), not queued for good
    await rejectsWith(A.delegate({ to_agent: B.agentId, task_id: 'task-hang', capability: REVIEW, input: {}, idempotency_key: 'k-hang' }), 'TIMEOUT')
    await until(() => B.runs.slots.size === 0, 'the retry\'s slot given back', 500 * DELEGATION_POLICY_TIMEOUT_FACTOR + 5_000)
    expect(B.runs.slots.refused).toEqual({ node: 0, delegator: 0 })
    // and the node stops (the executor waits for every idempotency key to be free)
    await B.stop()
    bStopped = true
  }, 30_000)
})
