/**
 * An executor checks a delegation's ticket signature before it takes a run
 * slot and asks its delegation policy (protocols/delegate.md, checks 5, 7, 8
 * in order): a forged ticket never reaches the policy (which may be an LLM
 * call or a person) and never holds a slot while it waits.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DELEGATE_MAX_FRAME_BYTES, DELEGATE_PROTOCOL } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { issueDelegationTicket, type RunTicket } from '../src/runlog/ticket.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { rejectsWith, startMesh, stopAll } from './helpers.ts'

const WORK = { capability_id: 'cap:policy-order', version: '1.0.0' }

describe('the delegation policy and a forged ticket', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let client: RpcClient
  let keyOfA: Parameters<typeof issueDelegationTicket>[0]
  const asked: string[] = []

  beforeAll(async () => {
    keyOfA = await generateKeyPair('Ed25519')
    nodes = await startMesh(2, { nodeOptions: (i) => i === 0 ? { privateKey: keyOfA } : {} })
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(WORK, async () => ({ done: true }))
    B.runs.setPolicy((req) => {
      asked.push(req.task_id)
      return undefined
    })
    await B.publishCard({ name: 'executor', capabilities: [WORK] })
    client = new RpcClient(A.host, { protocol: DELEGATE_PROTOCOL, maxFrameBytes: DELEGATE_MAX_FRAME_BYTES })
  })
  afterAll(async () => {
    client.close()
    await stopAll(nodes)
  })

  async function request (task: string, change: (t: RunTicket) => RunTicket, extra: Record<string, unknown> = {}): Promise<{ body: Record<string, unknown>, runId: string }> {
    const ticket = await issueDelegationTicket(keyOfA, { executor: B.agentId, correlation_id: task, capability: WORK, parent_run: null, authorized: [] })
    const changed = change(ticket)
    return { body: { to_agent: B.agentId, task_id: task, capability: WORK, input: {}, parent_run: null, ticket: changed, ...extra }, runId: changed.run_id }
  }
  const call = async (body: Record<string, unknown>): Promise<Record<string, unknown>> => client.call(peerIdOfAgent(B.agentId), 'delegate', body)
  /** A signature of the right length that A never made. */
  const forge = (t: RunTicket): RunTicket => ({ ...t, signature: Buffer.alloc(64, 7).toString('base64url') })

  it('is never asked about a ticket whose signature does not verify, with or without an idempotency key', async () => {
    const forged = await request('task-policy-forged', forge)
    await rejectsWith(call(forged.body), 'INVALID_SIGNATURE')
    const keyed = await request('task-policy-forged-idem', forge, { idempotency_key: 'k-policy' })
    await rejectsWith(call(keyed.body), 'INVALID_SIGNATURE')
    expect(asked).toEqual([])
    expect(B.runs.slots.size).toBe(0)
    for (const r of [forged, keyed]) expect(await B.runs.store.has(r.runId)).toBe(false)
  })

  it('is asked about a ticket that verifies, and the run is made', async () => {
    const good = await request('task-policy-good', t => t)
    const res = await call(good.body)
    expect((res.run as { run_id: string }).run_id).toBe(good.runId)
    expect(asked).toEqual(['task-policy-good'])
  })
})
