/**
 * A node that judges a ticket it issued itself compares the bytes with what it
 * signed instead of verifying its own signature again (src/runlog/ticket.ts).
 * The shortcut must never accept what a full verification refuses, and only
 * the issuer's own node may take it.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { describe, expect, it } from 'vitest'
import { agentIdOf } from '../src/identity/identity.ts'
import { issueDelegationTicket, verifyTicket, type RunTicket } from '../src/runlog/ticket.ts'

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
