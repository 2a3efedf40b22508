/**
 * A signature is accepted only in the one base64url text of its bytes. The
 * last character of 64 bytes in base64url carries 4 unused bits, so 15 other
 * texts decode to the same valid Ed25519 signature: a relaying peer could
 * rewrite an event's signature that way without breaking it, giving the same
 * event another hash, and a node that placed that copy first could not chain
 * the executor's next event (a fork it refuses). Events, tickets (the same
 * check) and cards.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { describe, expect, it } from 'vitest'
import { issueCard, verifyCard } from '../src/card/card.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { SignatureCache, newRunId, signEvent, verifyEventSync } from '../src/runlog/event.ts'

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'

/** The same bytes in another text: the last character's unused low bits changed. */
function malleate (signature: string): string {
  const i = ALPHABET.indexOf(signature.at(-1)!)
  const other = ALPHABET[(i & 0x30) | ((i + 1) & 0x0f)]!
  const text = signature.slice(0, -1) + other
  expect(Buffer.from(text, 'base64url').equals(Buffer.from(signature, 'base64url'))).toBe(true)
  return text
}

describe('one text per signature', () => {
  it('an event whose signature is another text of the same bytes is refused', async () => {
    const key = await generateKeyPair('Ed25519')
    const agent = agentIdOf(key)
    const e = await signEvent(key, {
      run_id: newRunId(agent), correlation_id: 'task-canonical', type: 'run.progress', payload: { step: 1 },
      at: new Date().toISOString(), seq: 2, prev: 'a'.repeat(64), executor: agent
    })
    const cache = new SignatureCache()
    expect(verifyEventSync(e, cache).signature).toBe(e.signature)
    expect(() => verifyEventSync({ ...e, signature: malleate(e.signature) }, new SignatureCache())).toThrow(/signature/i)
    // nor does a cache that verified the real one vouch for the other text
    expect(() => verifyEventSync({ ...e, signature: malleate(e.signature) }, cache)).toThrow(/signature/i)
  })

  it('a card whose signature is another text of the same bytes is refused', async () => {
    const key = await generateKeyPair('Ed25519')
    const card = await issueCard(key, { name: 'canonical', capabilities: [{ capability_id: 'cap:x', version: '1.0.0' }] }, 1)
    await expect(verifyCard(card)).resolves.toMatchObject({ agent_id: card.agent_id })
    await expect(verifyCard({ ...card, signature: malleate(card.signature) })).rejects.toThrow(/signature/i)
  })
})
