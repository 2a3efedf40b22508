import { describe, expect, it } from 'vitest'
import { CARD_MAX_BYTES, CARD_PROTOCOL_NAME, CARD_TTL_MS } from '../src/constants.ts'
import {
  capabilityString, cardMatches, cardRecordKey, decodeCardRecord, draftOf, encodeCardRecord, endpointOf, issueCard,
  capabilityKey, parseCapability, parseCardDraft, providerKeys, tagKey, selectCardRecord, validateCardRecord, verifyCard, type AgentCard
} from '../src/card/card.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { SignatureCache } from '../src/identity/signature-cache.ts'
import { codeOf, draft, expired, forged, fromTheFuture, mutated, newKey, oversized, signAs, unsigned } from './card-fixtures.ts'

const enc = new TextEncoder()

describe('issueCard and verifyCard', () => {
  it('issues a card that verifies, bound to the key that signed it', async () => {
    const key = await newKey()
    const card = await issueCard(key, draft, 7)
    expect(card.agent_id).toBe(agentIdOf(key))
    expect(card.endpoint).toBe(endpointOf(card.agent_id))
    expect(card.protocol).toBe(CARD_PROTOCOL_NAME)
    expect(card.seq).toBe(7)
    expect(Date.parse(card.expires_at) - Date.parse(card.issued_at)).toBe(CARD_TTL_MS)
    expect(await verifyCard(card)).toEqual(card)
    expect(await verifyCard(JSON.parse(JSON.stringify(card)), { expectAgent: card.agent_id })).toEqual(card)
  })

  it('rejects a card changed after signing, whatever field changed', async () => {
    const key = await newKey()
    const card = await issueCard(key, draft, 3)
    const other = agentIdOf(await newKey())
    const changes: Array<Partial<AgentCard>> = [
      { name: 'admin' },
      { description: 'now free' },
      { capabilities: [] },
      { capabilities: [{ capability_id: 'cap:translate', version: '9.9.9' }] },
      { capabilities: [...card.capabilities, { capability_id: 'cap:admin', version: '1.0.0' }] },
      { tags: ['nlp'] },
      { protocol: 'a2a' },
      { seq: 4 },
      { issued_at: new Date(Date.parse(card.issued_at) + 1).toISOString() },
      { expires_at: new Date(Date.parse(card.expires_at) - 1).toISOString() },
      // a card moved to another agent, with or without its endpoint
      { agent_id: other },
      { agent_id: other, endpoint: endpointOf(other) },
      { endpoint: '/ip4/10.0.0.1/tcp/4001' }
    ]
    for (const change of changes) {
      const { code, details } = await codeOf(verifyCard({ ...card, ...change }))
      expect(code, JSON.stringify(change)).toBe('INVALID_SIGNATURE')
      expect(['bad_signature', 'wrong_endpoint']).toContain(details.reason)
    }
    // a signature that is not the signer's
    const sig = card.signature
    const flipped = sig.slice(0, 10) + (sig[10] === 'A' ? 'B' : 'A') + sig.slice(11)
    expect((await codeOf(verifyCard({ ...card, signature: flipped }))).code).toBe('INVALID_SIGNATURE')
    expect((await codeOf(verifyCard(await mutated(key)))).code).toBe('INVALID_SIGNATURE')
  })

  it('rejects a card signed by a key other than the one its agent id certifies', async () => {
    const key = await newKey()
    const { code, details } = await codeOf(verifyCard(await forged(key, await newKey())))
    expect(code).toBe('INVALID_SIGNATURE')
    expect(details.reason).toBe('bad_signature')
  })

  it('rejects a genuine card served by the wrong agent', async () => {
    const card = await issueCard(await newKey(), draft, 1)
    const { code, details } = await codeOf(verifyCard(card, { expectAgent: agentIdOf(await newKey()) }))
    expect(code).toBe('INVALID_SIGNATURE')
    expect(details.reason).toBe('wrong_agent')
  })

  it('rejects unsigned, malformed and non-object cards as INVALID_REQUEST', async () => {
    const key = await newKey()
    const card = await issueCard(key, draft, 1)
    const bad: unknown[] = [
      await unsigned(key),
      { ...card, extra: 1 },
      { ...card, seq: '1' },
      { ...card, seq: -1 },
      { ...card, seq: 1.5 },
      { ...card, name: '' },
      { ...card, issued_at: 'yesterday' },
      { ...card, capabilities: [{ capability_id: 'cap:x' }] },
      { ...card, tags: ['dup', 'dup'] },
      { ...card, agent_id: 'not-an-agent' },
      { ...card, signature: 'short' },
      JSON.parse(`{"__proto__": {"x": 1}, ${JSON.stringify(card).slice(1)}`),
      null, 'card', 42, [card], {}
    ]
    for (const value of bad) {
      expect((await codeOf(verifyCard(value))).code, JSON.stringify(value)?.slice(0, 80)).toBe('INVALID_REQUEST')
    }
  })

  it('rejects expired cards, cards issued in the future and bad validity windows, and can skip the clock for a stored own card', async () => {
    const key = await newKey()
    const old = await expired(key)
    expect(await codeOf(verifyCard(old))).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'expired' } })
    expect(await codeOf(verifyCard(await fromTheFuture(key)))).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'not_yet_valid' } })
    // ignoreTime is for reloading one's own stored card: the signature still has to hold
    expect(await verifyCard(old, { ignoreTime: true })).toEqual(old)
    expect((await codeOf(verifyCard({ ...old, name: 'x' }, { ignoreTime: true }))).code).toBe('INVALID_SIGNATURE')

    const { signature: _, ...u } = await issueCard(key, draft, 1)
    const inverted = await signAs(key, { ...u, expires_at: u.issued_at })
    expect(await codeOf(verifyCard(inverted))).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'bad_validity' } })
    const tooLong = await signAs(key, { ...u, expires_at: new Date(Date.parse(u.issued_at) + 3 * CARD_TTL_MS).toISOString() })
    expect(await codeOf(verifyCard(tooLong))).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'bad_validity' } })
  })

  it(`caps a card at ${CARD_MAX_BYTES} bytes when issuing, verifying and decoding`, async () => {
    const key = await newKey()
    const big = await oversized(key)
    expect(JSON.stringify(big).length).toBeGreaterThan(CARD_MAX_BYTES)
    expect(await codeOf(verifyCard(big))).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'oversized' } })
    expect(await codeOf(issueCard(key, { name: big.name, description: big.description, capabilities: big.capabilities }, 1)))
      .toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'oversized' } })
    // a small card padded with whitespace is still over the cap on the wire
    const padded = enc.encode(JSON.stringify(await issueCard(key, draft, 1)) + ' '.repeat(CARD_MAX_BYTES))
    expect(() => decodeCardRecord(padded)).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST', details: { reason: 'oversized' } }))
    expect(() => decodeCardRecord(enc.encode('{"agent_id":'))).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST', details: { reason: 'malformed' } }))
  })

  it('refuses a draft that breaks the schema and dedupes what it repeats', async () => {
    const key = await newKey()
    const bad = [
      { name: '' },
      { name: 'x', capabilities: [{ capability_id: 'cap x', version: '1' }] },
      { name: 'x', capabilities: [{ capability_id: 'cap:x', version: '' }] },
      { name: 'x', tags: ['has space'] },
      { name: 'x', tags: Array.from({ length: 33 }, (_, i) => `t${i}`) },
      { name: 'x'.repeat(129) }
    ]
    for (const d of bad) expect((await codeOf(issueCard(key, d, 1))).code, JSON.stringify(d).slice(0, 60)).toBe('INVALID_REQUEST')
    const card = await issueCard(key, {
      name: 'x',
      capabilities: [{ capability_id: 'cap:a', version: '1' }, { capability_id: 'cap:a', version: '1' }, { capability_id: 'cap:a', version: '2' }],
      tags: ['t', 't']
    }, 1)
    expect(card.capabilities).toEqual([{ capability_id: 'cap:a', version: '1' }, { capability_id: 'cap:a', version: '2' }])
    expect(card.tags).toEqual(['t'])
  })
})

describe('parseCardDraft', () => {
  it('accepts a draft file\'s fields and returns a clean copy that issues the same card', async () => {
    const parsed = parseCardDraft(JSON.parse(JSON.stringify(draft)))
    expect(parsed).toEqual(draft)
    const key = await newKey()
    const card = await issueCard(key, parsed, 1)
    expect(draftOf(card)).toEqual(draft)
    expect(parseCardDraft({ name: 'only a name' })).toEqual({ name: 'only a name' })
  })

  it('refuses anything but a draft with INVALID_REQUEST, naming unknown fields', () => {
    const bad: unknown[] = [
      null, [], 'name', {}, { name: '' }, { name: 3 },
      { name: 'x', capability: [] },
      { name: 'x', description: 1 },
      { name: 'x', capabilities: { capability_id: 'cap:x', version: '1' } },
      { name: 'x', capabilities: [{ capability_id: 'cap:x' }] },
      { name: 'x', capabilities: [{ capability_id: 'cap:x', version: '1', extra: true }] },
      { name: 'x', tags: 'a' },
      { name: 'x', tags: ['a b'] }
    ]
    for (const value of bad) {
      expect(() => parseCardDraft(value), JSON.stringify(value)).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }))
    }
    expect(() => parseCardDraft({ name: 'x', capability: [] })).toThrow(/unknown field "capability"/)
  })
})

describe('parseCapability and matching', () => {
  it('parses id@version, a bare id and id@* and splits on the last @', () => {
    expect(parseCapability('cap:code-review@2.1.0')).toEqual({ capability_id: 'cap:code-review', version: '2.1.0' })
    expect(parseCapability('cap:code-review')).toEqual({ capability_id: 'cap:code-review', version: null })
    expect(parseCapability('cap:code-review@*')).toEqual({ capability_id: 'cap:code-review', version: '*' })
    expect(capabilityString(parseCapability('cap:a/b.c_d@1.0.0-rc.1+build'))).toBe('cap:a/b.c_d@1.0.0-rc.1+build')
    expect(capabilityString({ capability_id: 'cap:x', version: '*' })).toBe('cap:x')
  })

  it('throws INVALID_REQUEST for text that is not a capability', () => {
    for (const text of ['', '@1.0.0', 'cap:x@', 'cap x@1', 'cap:x@1 0', 'a@b@1.0', 'cap:x@ver/sion', 'x'.repeat(129)]) {
      expect(() => parseCapability(text), text).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }))
    }
  })

  it('matches a card by exact version, any version and every requested tag', async () => {
    const card = await issueCard(await newKey(), draft, 1)
    expect(cardMatches(card, { capability: { capability_id: 'cap:translate', version: '1.0.0' } })).toBe(true)
    expect(cardMatches(card, { capability: { capability_id: 'cap:translate', version: null } })).toBe(true)
    expect(cardMatches(card, { capability: { capability_id: 'cap:translate' } })).toBe(true)
    expect(cardMatches(card, { capability: { capability_id: 'cap:translate', version: '2.0.0' } })).toBe(false)
    expect(cardMatches(card, { capability: { capability_id: 'cap:other', version: null } })).toBe(false)
    expect(cardMatches(card, { tags: ['nlp', 'translate'] })).toBe(true)
    expect(cardMatches(card, { tags: ['nlp', 'vision'] })).toBe(false)
    expect(cardMatches(card, { capability: { capability_id: 'cap:translate' }, tags: ['vision'] })).toBe(false)
  })

  it('announces one provider key per capability id (any version) and one per tag', async () => {
    const card = await issueCard(await newKey(), {
      name: 'x',
      capabilities: [{ capability_id: 'cap:a', version: '1' }, { capability_id: 'cap:a', version: '2' }, { capability_id: 'cap:b', version: '1' }],
      tags: ['t', 'u']
    }, 1)
    const keys = (await providerKeys(card)).map(k => k.toString())
    // a (both versions, once), b, tags t and u
    expect(keys).toHaveLength(4)
    expect(new Set(keys).size).toBe(4)
    expect(keys).toContain((await capabilityKey('cap:a')).toString())
    expect(keys).toContain((await tagKey('u')).toString())
    // another agent with another version of the same capability shares the key, so a query finds both
    const again = await issueCard(await newKey(), { name: 'y', capabilities: [{ capability_id: 'cap:a', version: '7' }], tags: ['t'] }, 1)
    const shared = (await providerKeys(again)).map(k => k.toString())
    expect(shared).toHaveLength(2)
    expect(shared.every(k => keys.includes(k))).toBe(true)
  })
})

describe('DHT record validator and selector', () => {
  async function record (card: unknown): Promise<Uint8Array> {
    return enc.encode(JSON.stringify(card))
  }

  it('accepts a valid record only under its own agent\'s key', async () => {
    const key = await newKey()
    const card = await issueCard(key, draft, 1)
    await expect(validateCardRecord(cardRecordKey(card.agent_id), encodeCardRecord(card))).resolves.toBeUndefined()
    const elsewhere = agentIdOf(await newKey())
    expect((await codeOf(validateCardRecord(cardRecordKey(elsewhere), encodeCardRecord(card)))).code).toBe('INVALID_SIGNATURE')
    expect((await codeOf(validateCardRecord(enc.encode(`/other/${card.agent_id}`), encodeCardRecord(card)))).code).toBe('INVALID_REQUEST')
    expect((await codeOf(validateCardRecord(enc.encode(`/aap-card/${card.agent_id}/x`), encodeCardRecord(card)))).code).toBe('INVALID_SIGNATURE')
  })

  it('rejects every kind of bad record with a typed error', async () => {
    const key = await newKey()
    const k = cardRecordKey(agentIdOf(key))
    const cases: Array<[string, Uint8Array, string]> = [
      ['malformed', enc.encode('not json {'), 'INVALID_REQUEST'],
      ['not utf-8', Uint8Array.from([0xff, 0xfe, 0x00]), 'INVALID_REQUEST'],
      ['empty', new Uint8Array(0), 'INVALID_REQUEST'],
      ['oversized', await record(await oversized(key)), 'INVALID_REQUEST'],
      ['unsigned', await record(await unsigned(key)), 'INVALID_REQUEST'],
      ['forged', await record(await forged(key, await newKey())), 'INVALID_SIGNATURE'],
      ['mutated', await record(await mutated(key)), 'INVALID_SIGNATURE'],
      ['expired', await record(await expired(key)), 'INVALID_REQUEST']
    ]
    for (const [what, value, code] of cases) {
      expect((await codeOf(validateCardRecord(k, value))).code, what).toBe(code)
    }
  })

  it('selects the highest seq among records that verify, never a forged or expired one', async () => {
    const key = await newKey()
    const k = cardRecordKey(agentIdOf(key))
    const records = [
      enc.encode('garbage'),
      encodeCardRecord(await issueCard(key, draft, 1)),
      encodeCardRecord(await forged(key, await newKey(), 99)),
      encodeCardRecord(await issueCard(key, draft, 3)),
      encodeCardRecord(await expired(key, 50)),
      encodeCardRecord(await issueCard(key, draft, 2))
    ]
    expect(await selectCardRecord(k, records)).toBe(3)
    // on an equal seq, every node picks the same card: the one that expires last
    const a = await issueCard(key, draft, 5, Date.now() - 1000)
    const b = await issueCard(key, draft, 5)
    expect(await selectCardRecord(k, [encodeCardRecord(a), encodeCardRecord(b)])).toBe(1)
    expect(await selectCardRecord(k, [encodeCardRecord(b), encodeCardRecord(a)])).toBe(0)
  })
})

describe('verifyCard with the node\'s verification cache', () => {
  it('checks a card once with Ed25519; the same bytes again are a hit, and a changed copy under the same signature is refused', async () => {
    const signatures = new SignatureCache()
    const key = await newKey()
    const card = await issueCard(key, draft, 1)
    await verifyCard(card, { signatures })
    await verifyCard(structuredClone(card), { signatures })
    expect(signatures.stats).toEqual({ checked: 1, hits: 1, refused: 0 })
    const changed = { ...card, name: 'someone else' }
    expect((await codeOf(verifyCard(changed, { signatures }))).code).toBe('INVALID_SIGNATURE')
    expect(signatures.stats.refused).toBe(1)
  })
})
