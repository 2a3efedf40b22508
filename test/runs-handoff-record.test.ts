/**
 * A handoff asked of a run's executor carries the receiver's signed peer
 * record when the one who asks holds it (src/wire/peer-records.ts): the
 * executor adds it to its peer store and dials the receiver with no DHT
 * lookup. Here the lookup could not find the receiver at all: the delegator
 * serves no DHT (client mode) and the executor knows no other node, so the
 * record is the only way to the receiver. A record that is not the
 * receiver's is not taken, and the handoff then fails as it would without one.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { heldPeerRecord, peerRecordStats } from '../src/wire/peer-records.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { heldRun, holdingWorkers, rejectsWith, startLoneNodes, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:record-handoff', version: '1.0.0' }

describe('a handoff carries the receiver\'s signed peer record', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, D: MeshNode
  const held = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    // A: the delegator, asking the DHT but serving none; B: the executor; D: the receiver. A short
    // budget per request: a handoff whose receiver cannot be reached fails within it
    nodes = [
      ...await startLoneNodes(1, { dht: { clientMode: true }, runHandlerTimeoutMs: 3_000 }),
      ...await startLoneNodes(2, { runHandlerTimeoutMs: 3_000 })
    ]
    ;[A, B, D] = nodes as [MeshNode, MeshNode, MeshNode]
    await holdingWorkers([B, D], WORK, held)
    // only A connects to the others; identify brings A each one's signed record
    for (const n of [B, D]) await A.host.dial(n.host.getMultiaddrs()[0]!, { signal: AbortSignal.timeout(10_000) })
    await until(async () => (await A.host.peerStore.get(peerIdOfAgent(D.agentId))).peerRecordEnvelope !== undefined, 'D\'s record at A')
    // A found D (its card is held, so the executor need not fetch it)
    await A.discovery.getCard(D.agentId)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  it('with another agent\'s record, the executor cannot reach the receiver, and the run stays where it was', async () => {
    const runId = await heldRun(A, B, WORK, 'task-record-wrong', held)
    expect(await B.host.peerStore.has(peerIdOfAgent(D.agentId))).toBe(false)
    const wrong = await heldPeerRecord(A.host, peerIdOfAgent(B.agentId), silentLogger())
    expect(wrong).toBeDefined()
    const stats = { ...peerRecordStats(B.host) }
    const client = new RpcClient(A.host, { protocol: CONTROL_PROTOCOL, maxFrameBytes: CONTROL_MAX_FRAME_BYTES })
    try {
      const body = { run_id: runId, to_agent: D.agentId, context: {}, to_card: A.discovery.knownCard(D.agentId), to_record: wrong }
      await rejectsWith(client.call(peerIdOfAgent(B.agentId), 'handoff', body, { callTimeoutMs: 8_000 }), 'AGENT_NOT_FOUND')
      // a record that is not base64url is refused with the request, by its schema
      await rejectsWith(client.call(peerIdOfAgent(B.agentId), 'handoff', { ...body, to_record: 'not base64url!' }), 'INVALID_REQUEST')
      // base64url that is no envelope is refused before the peer store, and the handoff goes on without it
      await rejectsWith(client.call(peerIdOfAgent(B.agentId), 'handoff', { ...body, to_record: 'AAAA' }, { callTimeoutMs: 8_000 }), 'AGENT_NOT_FOUND')
    } finally {
      client.close()
    }
    expect(peerRecordStats(B.host)).toEqual({ taken: stats.taken, notTaken: stats.notTaken + 1, refused: stats.refused + 1 })
    expect((await B.runs.getRun(runId)).state).toBe('running')
  })

  it('with the receiver\'s record, the executor dials the receiver with no lookup and the run moves to it', async () => {
    const runId = await heldRun(A, B, WORK, 'task-record-offered', held)
    const taken = peerRecordStats(B.host).taken
    const next = await A.handoff(runId, D.agentId, { why: 'record offered' })
    expect(next.agent_id).toBe(D.agentId)
    expect(peerRecordStats(B.host).taken).toBe(taken + 1)
    expect((await B.runs.getRun(runId)).state).toBe('completed')
    await until(() => held.has(next.run_id), 'the successor to start on D')
  })
})
