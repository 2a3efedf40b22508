/**
 * An executor checks a delegation ticket's signature on libuv's thread pool
 * while it checks the rest of the request, signs run.started and looks the
 * run id up (src/runs/admission.ts, signatureVerdict). What a delegator sees
 * must not change with that: a ticket that does not verify is refused with
 * INVALID_SIGNATURE, also when something else is wrong with the request too
 * (the signature is still the answer), also with an idempotency key, and no
 * run is ever stored for it. A good ticket still makes a run. And the
 * signature is known before the executor takes a run slot and asks its
 * delegation policy (checks 5, 7, 8 in order): a forged ticket never reaches
 * the policy (which may be an LLM call or a person) and never holds a slot.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DELEGATE_MAX_FRAME_BYTES, DELEGATE_PROTOCOL } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { issueDelegationTicket, type RunTicket } from '../src/runlog/ticket.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { rejectsWith, startMesh, stopAll } from './helpers.ts'

const WORK = { capability_id: 'cap:ticket-signature', version: '1.0.0' }

describe('a delegation ticket whose signature does not verify', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let client: RpcClient
  let keyOfA: Parameters<typeof issueDelegationTicket>[0]
  /** The tasks B's delegation policy was asked about. */
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

  it('is refused with INVALID_SIGNATURE and no run is stored', async () => {
    const { body, runId } = await request('task-sig-forged', forge)
    await rejectsWith(call(body), 'INVALID_SIGNATURE')
    expect(await B.runs.store.has(runId)).toBe(false)
  })

  it('is refused with INVALID_SIGNATURE even when the ticket also does not describe the request', async () => {
    // the ticket names another correlation: checked on this thread, it fails first; the signature still answers
    const { body, runId } = await request('task-sig-mismatch', (t) => forge({ ...t, correlation_id: 'another-task' }))
    await rejectsWith(call(body), 'INVALID_SIGNATURE')
    expect(await B.runs.store.has(runId)).toBe(false)
    // the same mismatch under a good signature is the mismatch
    const good = await issueDelegationTicket(keyOfA, { executor: B.agentId, correlation_id: 'another-task', capability: WORK, parent_run: null, authorized: [] })
    const err = await rejectsWith(call({ ...body, ticket: good }), 'INVALID_REQUEST')
    expect(err.details?.reason).toBe('ticket_mismatch')
  })

  it('is refused with INVALID_SIGNATURE with an idempotency key, and a retry with a good ticket then makes the run', async () => {
    const { body, runId } = await request('task-sig-idem', forge, { idempotency_key: 'k-1' })
    await rejectsWith(call(body), 'INVALID_SIGNATURE')
    expect(await B.runs.store.has(runId)).toBe(false)
    const retry = await request('task-sig-idem', t => t, { idempotency_key: 'k-1' })
    const res = await call(retry.body)
    expect((res.run as { run_id: string }).run_id).toBe(retry.runId)
    expect(await B.runs.store.has(retry.runId)).toBe(true)
  })

  it('a ticket that verifies still makes its run, its signature checked once', async () => {
    const before = B.signatures.stats.checked
    const { body, runId } = await request('task-sig-good', t => t)
    const res = await call(body)
    expect((res.run as { run_id: string, state: string }).run_id).toBe(runId)
    expect(await B.runs.store.has(runId)).toBe(true)
    expect(B.signatures.stats.checked).toBeGreaterThan(before)
  })

  it('never reaches the delegation policy nor holds a slot, with or without an idempotency key', async () => {
    const from = asked.length
    const forged = await request('task-policy-forged', forge)
    await rejectsWith(call(forged.body), 'INVALID_SIGNATURE')
    const keyed = await request('task-policy-forged-idem', forge, { idempotency_key: 'k-policy' })
    await rejectsWith(call(keyed.body), 'INVALID_SIGNATURE')
    // before: the policy was asked about both while the signature was still being checked
    expect(asked.slice(from)).toEqual([])
    expect(B.runs.slots.size).toBe(0)
    for (const r of [forged, keyed]) expect(await B.runs.store.has(r.runId)).toBe(false)
    const good = await request('task-policy-good', t => t)
    expect(((await call(good.body)).run as { run_id: string }).run_id).toBe(good.runId)
    expect(asked.slice(from)).toEqual(['task-policy-good'])
  })
})
