/**
 * One key, one agent id (src/identity/identity.ts peerIdOfAgent). An Ed25519 key's protobuf can be written with
 * its two fields in the other order; libp2p parses that as the same key under another id (12D7… instead of
 * 12D3KooW…), which the schema's pattern lets through. Such an alias verified the key's signatures and named a
 * second agent wherever the node keeps something per agent id (a review's finding, left open since session 45).
 * Now an alias is no agent id: AGENT_NOT_FOUND, `reason: non_canonical`, and nothing signed verifies under it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromString } from '@libp2p/peer-id'
import { base58btc } from 'multiformats/bases/base58'
import { agentIdOf, peerIdOfAgent } from '../src/identity/identity.ts'
import { sign, verify } from '../src/identity/signing.ts'
import type { MeshNode } from '../src/node.ts'
import { rejectsWith, servingNode, startLoneNodes, stopAll } from './helpers.ts'

/** The same Ed25519 key as `agentId`, its protobuf fields (Type = 1, Data) written Data first. */
function aliasOf (agentId: string): string {
  const raw = peerIdFromString(agentId).publicKey!.raw
  const pb = new Uint8Array([0x12, 0x20, ...raw, 0x08, 0x01])
  return base58btc.encode(new Uint8Array([0x00, pb.length, ...pb])).slice(1)
}

const CAP = { capability_id: 'cap:alias', version: '1.0.0' }

describe('agent id aliases of one key', () => {
  it('an alias parses to the same key in libp2p, and is no agent id here', async () => {
    const key = await generateKeyPair('Ed25519')
    const id = agentIdOf(key)
    const alias = aliasOf(id)
    expect(alias).not.toBe(id)
    // what libp2p alone accepts
    expect(peerIdFromString(alias).publicKey?.equals(key.publicKey)).toBe(true)
    expect(peerIdOfAgent(id).toString()).toBe(id)
    expect(() => peerIdOfAgent(alias)).toThrow(expect.objectContaining({ code: 'AGENT_NOT_FOUND', details: { agent_id: alias, reason: 'non_canonical' } }))
    // asked twice (the second from the parse cache, which keeps valid ids only)
    expect(() => peerIdOfAgent(alias)).toThrow(expect.objectContaining({ details: expect.objectContaining({ reason: 'non_canonical' }) }))
    // what the key signs verifies under its id, never under the alias
    const signature = await sign(key, 'aap-test-alias', { n: 1 })
    expect(await verify(id, 'aap-test-alias', { n: 1 }, signature)).toBe(true)
    expect(await verify(alias, 'aap-test-alias', { n: 1 }, signature)).toBe(false)
  })

  describe('on the mesh', () => {
    let nodes: MeshNode[] = []
    beforeAll(async () => {
      const E = await servingNode(CAP)
      const [D] = await startLoneNodes(1) as [MeshNode]
      nodes = [E, D]
      expect(await D.join(E.addresses)).toBe(1)
    })
    afterAll(async () => { await stopAll(nodes) })

    it('a delegation to an alias of a reachable agent is refused, and one to its id is taken', async () => {
      const [E, D] = nodes as [MeshNode, MeshNode]
      const err = await rejectsWith(D.delegate({ to_agent: aliasOf(E.agentId), task_id: 'alias-1', capability: CAP, input: {} }, { follow: false }), 'AGENT_NOT_FOUND')
      expect(err.details).toMatchObject({ reason: 'non_canonical' })
      const run = await D.delegate({ to_agent: E.agentId, task_id: 'alias-2', capability: CAP, input: {} }, { follow: false })
      expect(run.agent_id).toBe(E.agentId)
    })
  })
})
