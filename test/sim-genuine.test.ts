/**
 * The simulation's forgery count: a card its agent published again (a
 * republish re-signs it with a higher seq) is genuine; a card its agent's key
 * did not sign, or one that says what the agent never published, is not.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { describe, expect, it } from 'vitest'
import { issueCard } from '../src/card/card.ts'
import { isGenuineCard } from '../src/sim/genuine.ts'

describe('isGenuineCard', () => {
  it('accepts the published card and its republication, refuses forgeries', async () => {
    const key = await generateKeyPair('Ed25519')
    const draft = { name: 'a', description: 'd', capabilities: [{ capability_id: 'cap:x', version: '1.0.0' }], tags: ['t'] }
    const published = await issueCard(key, draft, 1)
    expect(await isGenuineCard(published, published)).toBe(true)
    expect(await isGenuineCard(await issueCard(key, draft, 2), published)).toBe(true)
    // the victim's card with more capabilities and a higher seq, under its old signature
    expect(await isGenuineCard({ ...published, seq: 101, capabilities: [...draft.capabilities, { capability_id: 'cap:y', version: '1.0.0' }] }, published)).toBe(false)
    // signed by the agent, but not what it published
    expect(await isGenuineCard(await issueCard(key, { ...draft, name: 'hijacked' }, 3), published)).toBe(false)
    // an older card than the one published, and a card of an agent nobody published
    expect(await isGenuineCard(published, await issueCard(key, draft, 2))).toBe(false)
    expect(await isGenuineCard(published, undefined)).toBe(false)
  })
})
