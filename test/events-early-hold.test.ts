/**
 * Events held early (gossip ahead of their run's chain) take the
 * correlation's early budget until their gap is filled. An admitted executor
 * that sends events past a seq it never sends (and answers no fetch) kept
 * that budget for good, and every other run's reordered gossip then went by
 * sync. Held events are now let go EVENTS_EARLY_HOLD_MS after their gap's
 * fetch began. Found by session 45's events review.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_EARLY_HOLD_MS } from '../src/events/constants.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { eventHash, signEvent } from '../src/runlog/event.ts'
import { issueDelegationTicket } from '../src/runlog/ticket.ts'
import { collect } from './events-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { rawGossip } from './fixtures/raw-gossip.ts'

const TASK = 'task-early-hold'
const CAP = { capability_id: 'cap:early-hold', version: '1.0.0' }
const at = (): string => new Date().toISOString()

describe('events held ahead of a gap nobody fills', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, P: MeshNode
  let dKey: PrivateKey, xKey: PrivateKey

  beforeAll(async () => {
    ;[dKey, xKey] = await Promise.all([generateKeyPair('Ed25519'), generateKeyPair('Ed25519')])
    nodes = await startMesh(2)
    ;[A, P] = nodes as [MeshNode, MeshNode]
  })
  afterAll(async () => { await stopAll(nodes) })

  it('are let go after EVENTS_EARLY_HOLD_MS, giving the correlation\'s early budget back', async () => {
    await collect(A, TASK, { owner: agentIdOf(dKey) })
    const D = agentIdOf(dKey)
    const X = agentIdOf(xKey)
    const { send } = await rawGossip(P, A, TASK)
    const ticket = await issueDelegationTicket(dKey, { executor: X, correlation_id: TASK, capability: CAP, parent_run: null, authorized: [D] })
    const r1 = await signEvent(xKey, {
      run_id: ticket.run_id, correlation_id: TASK, type: 'run.started', at: at(), seq: 1, prev: null, executor: X,
      payload: { delegator: D, capability: CAP, parent_run: null, input: {}, ticket: ticket as unknown as Record<string, unknown> }
    })
    const r2 = await signEvent(xKey, { run_id: r1.run_id, correlation_id: TASK, type: 'run.progress', at: at(), seq: 2, prev: eventHash(r1), executor: X, payload: { step: 1 } })
    const r3 = await signEvent(xKey, { run_id: r1.run_id, correlation_id: TASK, type: 'run.progress', at: at(), seq: 3, prev: eventHash(r2), executor: X, payload: { step: 2 } })
    const t = (A.events as unknown as { correlations: { get: (id: string) => { earlyCount: number } } }).correlations
    await send(r1)
    await until(() => A.events.stats.gossip.accepted > 0, 'r1 placed')
    // seq 3 without seq 2: held early; the executor is only a key here, so the gap's fetch finds nothing
    await send(r3)
    await until(() => t.get(TASK).earlyCount === 1, 'seq 3 held early')
    const heldAt = Date.now()
    await until(() => t.get(TASK).earlyCount === 0, 'the held event let go', EVENTS_EARLY_HOLD_MS * 4)
    expect(Date.now() - heldAt).toBeGreaterThanOrEqual(EVENTS_EARLY_HOLD_MS - 100)
    expect(A.events.stats.earlyDropped).toBe(1)
  }, 30_000)
})
