/**
 * A handoff asked of a run's executor carries the receiver's card when the
 * one who asks holds it: the executor verifies that card instead of fetching
 * it (no card fetch, no DHT lookup on the handoff's path), and refuses a card
 * that does not verify, leaving the run where it was.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { heldRun, holdingWorkers, rejectsWith, startMesh, stopAll } from './helpers.ts'

const WORK = { capability_id: 'cap:card-handoff', version: '1.0.0' }

describe('a handoff carries the receiver\'s card', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, D: MeshNode
  const held = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[A, B, D] = nodes as [MeshNode, MeshNode, MeshNode]
    await holdingWorkers([B, D], WORK, held)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  it('the executor uses the delegator\'s verified copy of the card: it fetches nothing', async () => {
    const runId = await heldRun(A, B, WORK, 'task-card-offered', held)
    // the delegator holds D's card (it found it); the executor does not
    await A.discovery.getCard(D.agentId)
    expect(A.discovery.knownCard(D.agentId)?.agent_id).toBe(D.agentId)
    expect(B.discovery.knownCard(D.agentId)).toBeUndefined()
    const before = { ...B.discovery.stats }
    const next = await A.handoff(runId, D.agentId, { why: 'card offered' })
    expect(next.agent_id).toBe(D.agentId)
    expect(B.discovery.stats.fetchedCards).toBe(before.fetchedCards)
    expect(B.discovery.stats.dhtFallbacks).toBe(before.dhtFallbacks)
    // the offered card served that call only: any delegator may offer cards, so none is kept from an offer
    expect(B.discovery.knownCard(D.agentId)).toBeUndefined()
  })

  // session 56's card review: each refused handoff (the capability not declared) left its offered card cached, so a
  // delegator of one held run pushed every honest card out of the cache (1,032 offers, about a second) and then,
  // past the seq index, had an agent's older card cached and answered to B's own callers
  it('a refused handoff\'s offered card is not kept', async () => {
    await A.publishCard({ name: 'delegator', capabilities: [{ capability_id: 'cap:card-handoff-other', version: '1.0.0' }] })
    const runId = await heldRun(A, B, WORK, 'task-card-refused-offer', held)
    const client = new RpcClient(A.host, { protocol: CONTROL_PROTOCOL, maxFrameBytes: CONTROL_MAX_FRAME_BYTES })
    try {
      // A's own card declares no WORK: the handoff is refused after the card was verified
      const own = A.discovery.knownCard(A.agentId)
      expect(own?.agent_id).toBe(A.agentId)
      await rejectsWith(client.call(peerIdOfAgent(B.agentId), 'handoff', { run_id: runId, to_agent: A.agentId, context: {}, to_card: own }), 'CAPABILITY_NOT_SUPPORTED')
      expect(B.discovery.knownCard(A.agentId)).toBeUndefined()
    } finally {
      client.close()
    }
    expect((await B.runs.getRun(runId)).state).toBe('running')
  })

  it('a card that does not verify is refused, and the run stays with its executor', async () => {
    const runId = await heldRun(A, B, WORK, 'task-card-forged', held)
    const card = A.discovery.knownCard(D.agentId)
    expect(card).toBeDefined()
    const client = new RpcClient(A.host, { protocol: CONTROL_PROTOCOL, maxFrameBytes: CONTROL_MAX_FRAME_BYTES })
    try {
      const forged = { ...card, name: 'not what D signed' }
      const err = await rejectsWith(client.call(peerIdOfAgent(B.agentId), 'handoff', { run_id: runId, to_agent: D.agentId, context: {}, to_card: forged }), 'INVALID_SIGNATURE')
      expect(err.message).toMatch(/signature/i)
      // another agent's card for D is refused too
      const other = await rejectsWith(client.call(peerIdOfAgent(B.agentId), 'handoff', { run_id: runId, to_agent: D.agentId, context: {}, to_card: B.discovery.knownCard(B.agentId) }), 'INVALID_SIGNATURE')
      expect(other.code).toBe('INVALID_SIGNATURE')
    } finally {
      client.close()
    }
    expect((await B.runs.getRun(runId)).state).toBe('running')
  })
})
