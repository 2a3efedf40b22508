/**
 * A node that judges a ticket it issued itself compares the bytes with what it
 * signed instead of verifying its own signature again (src/runlog/ticket.ts).
 * The shortcut must never accept what a full verification refuses, and only
 * the issuer's own node may take it. And a ticket that names a run the
 * executor holds already never takes that run over.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DELEGATE_PROTOCOL } from '../src/constants.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { issueDelegationTicket, verifyTicket, type RunTicket } from '../src/runlog/ticket.ts'
import { RawWire } from './fixtures/raw-wire.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:ticket-test', version: '1.0.0' }

describe('tickets a node issued itself', () => {
  it('pass for their issuer without a second verification, and a changed copy fails for everyone', async () => {
    const key = await generateKeyPair('Ed25519')
    const other = await generateKeyPair('Ed25519')
    const executor = agentIdOf(await generateKeyPair('Ed25519'))
    const self = agentIdOf(key)
    const ticket = await issueDelegationTicket(key, { executor, correlation_id: 'task-issued-1', capability: CAP, parent_run: null, authorized: [] })
    expect(verifyTicket(structuredClone(ticket), { self }).run_id).toBe(ticket.run_id)
    // another node (another agent) verifies it in full, and it holds
    expect(verifyTicket(structuredClone(ticket), { self: agentIdOf(other) }).run_id).toBe(ticket.run_id)
    expect(verifyTicket(structuredClone(ticket)).run_id).toBe(ticket.run_id)

    // the same signature over other bytes: refused by the issuer's node as by anyone
    const changed: RunTicket = { ...structuredClone(ticket), correlation_id: 'task-issued-2' }
    for (const opts of [{ self }, { self: agentIdOf(other) }, {}]) {
      expect(() => verifyTicket(structuredClone(changed), opts)).toThrow(expect.objectContaining({ code: 'INVALID_SIGNATURE' }))
    }
    const widened: RunTicket = { ...structuredClone(ticket), authorized: [agentIdOf(other)] }
    expect(() => verifyTicket(widened, { self })).toThrow(expect.objectContaining({ code: 'INVALID_SIGNATURE' }))
  })

  it('a ticket signed by another key under this node\'s name is still refused', async () => {
    const key = await generateKeyPair('Ed25519')
    const forger = await generateKeyPair('Ed25519')
    const self = agentIdOf(key)
    const executor = agentIdOf(await generateKeyPair('Ed25519'))
    // the forger issues a ticket and relabels it as this node's
    const forged = await issueDelegationTicket(forger, { executor, correlation_id: 'task-issued-3', capability: CAP, parent_run: null, authorized: [] })
    const relabeled: RunTicket = { ...forged, issuer: self, delegator: self }
    expect(() => verifyTicket(relabeled, { self })).toThrow(expect.objectContaining({ code: 'INVALID_SIGNATURE' }))
  })
})

describe('a ticket whose run id is taken', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  const started: string[] = []
  const QUICK = { capability_id: 'cap:ticket-taken', version: '1.0.0' }

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(QUICK, async (ctx) => {
      started.push(ctx.run.run_id)
      return { n: ctx.input.n }
    })
    await B.publishCard({ name: 'taken', capabilities: [QUICK] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('is refused (run_id_taken) while the run is live and after it ended, and the run stays as it was', async () => {
    const req = { to_agent: B.agentId, task_id: 'task-ticket-taken', capability: QUICK, input: { n: 1 } }
    const ticket = await A.runs.ticketFor(req)
    const wire = await RawWire.open(A.host, B.host.peerId, DELEGATE_PROTOCOL)
    try {
      const body = { ...req, parent_run: null, ticket }
      const first = await wire.call({ id: 1, type: 'delegate', body })
      expect(first.ok).toBe(true)
      // at once, while the run may still be live, and again once it ended
      const again = await wire.call({ id: 2, type: 'delegate', body: { ...body, input: { n: 2 } } })
      expect(again.ok).toBe(false)
      expect(again.error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'run_id_taken' } })
      await until(async () => (await B.runs.getRun(ticket.run_id)).state === 'completed', 'the first run to complete')
      const late = await wire.call({ id: 3, type: 'delegate', body: { ...body, input: { n: 3 } } })
      expect(late.error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'run_id_taken' } })
    } finally {
      await wire.closeWrite()
    }
    const run = await B.runs.getRun(ticket.run_id)
    expect(run.output).toEqual({ n: 1 })
    expect(started).toEqual([ticket.run_id])
  })
})
