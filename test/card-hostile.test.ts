/**
 * Hostile and broken peers on the card protocol. Real nodes announce a
 * capability and then answer /aap/card/0.1.0 with tampered cards, broken
 * frames or nothing at all; discover() must return only the honest agent and
 * getCard() must fail with a typed error.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { PrivateKey, Stream } from '@libp2p/interface'
import { CARD_MAX_FRAME_BYTES, CARD_PROTOCOL, DHT_PUT_TIMEOUT_MS } from '../src/constants.ts'
import { capabilityKey, cardRecordKey, encodeCardRecord, issueCard, tagKey, verifyCard, type AgentCard } from '../src/card/card.ts'
import type { DiscoveryQuery } from '../src/card/discovery.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { encodeFrame, serve } from '../src/wire/rpc.ts'
import { codeOf, draft, expired, forged, mutated, newKey, oversized, unsigned } from './card-fixtures.ts'
import { startMesh, stopAll, waitForRouting } from './helpers.ts'

const cap = { capability_id: 'cap:translate', version: '1.0.0' }
const byVersion: DiscoveryQuery = { capability: cap }
const byId: DiscoveryQuery = { capability: { capability_id: cap.capability_id, version: null } }
const byTag: DiscoveryQuery = { tags: ['translate'] }
const enc = new TextEncoder()
let memCounter = 0

/** A node that claims the capability in the DHT (provider records) but never publishes a card record. */
async function claimant (key: PrivateKey, via: MeshNode): Promise<MeshNode> {
  const node = await createMeshNode({ listen: [`/memory/aap-card-hostile-${process.pid}-${memCounter++}`], localMesh: true, privateKey: key })
  await node.start()
  expect(await node.join(via.addresses)).toBe(1)
  return node
}

async function provide (node: MeshNode): Promise<void> {
  const keys = [await capabilityKey(cap.capability_id), await tagKey('translate')]
  for (const k of keys) {
    let reached = 0
    for await (const ev of node.host.services.dht.provide(k, { signal: AbortSignal.timeout(DHT_PUT_TIMEOUT_MS) })) {
      if (ev.name === 'PEER_RESPONSE') reached++
    }
    expect(reached).toBeGreaterThan(0)
  }
}

function ids (cards: AgentCard[]): string[] {
  return cards.map(c => c.agent_id).sort()
}

describe('discovery with hostile and broken card-protocol peers', () => {
  let nodes: MeshNode[] = []
  let honest: MeshNode
  let reader: MeshNode
  let liar: MeshNode
  let liarKey: PrivateKey
  let broken: MeshNode
  let brokenKey: PrivateKey
  /** What the liar answers to get_card. */
  let lie: () => Promise<object> = async () => ({})
  /** What the broken peer writes back on the raw stream. */
  let rawMode: 'stall' | 'garbage' | 'huge' | 'partial' | 'connection-error' = 'stall'
  const held: Stream[] = []

  beforeAll(async () => {
    nodes = await startMesh(5)
    honest = nodes[1]!
    reader = nodes[3]!
    await honest.publishCard({ ...draft, capabilities: [cap] })
    expect(await honest.discovery.announce()).toBeGreaterThan(0)

    // the liar answers over the real rpc responder with whatever `lie` returns
    liarKey = await newKey()
    liar = await claimant(liarKey, nodes[0]!)
    await liar.host.unhandle(CARD_PROTOCOL)
    await serve(liar.host, {
      protocol: CARD_PROTOCOL,
      maxFrameBytes: CARD_MAX_FRAME_BYTES,
      methods: { get_card: { handle: async () => lie() } }
    })

    // the broken peer accepts the stream and then misbehaves at the byte level
    brokenKey = await newKey()
    broken = await claimant(brokenKey, nodes[2]!)
    await broken.host.unhandle(CARD_PROTOCOL)
    await broken.host.handle(CARD_PROTOCOL, (stream) => {
      held.push(stream)
      stream.addEventListener('message', () => {
        if (rawMode === 'garbage') stream.send(Uint8Array.from([16, ...enc.encode('this is not json')]))
        if (rawMode === 'huge') stream.send(encodeFrame({ id: 1, ok: true, body: { card: 'x'.repeat(CARD_MAX_FRAME_BYTES) } }))
        if (rawMode === 'partial') stream.send(Uint8Array.from([100, ...enc.encode('{"id":1,')]))
        if (rawMode === 'connection-error') stream.send(encodeFrame({ id: null, ok: false, error: { code: 'NO_SUCH_CODE', message: 'x' } }))
        // 'stall': read the request, never answer
      })
    })
    await waitForRouting([...nodes, liar, broken])
    await provide(liar)
    await provide(broken)
  })

  afterAll(async () => {
    for (const s of held) s.abort(new Error('test over'))
    await stopAll([...nodes, liar, broken])
  })

  it('never returns a tampered card from discover, and getCard fails with AGENT_NOT_FOUND naming why', async () => {
    rawMode = 'garbage'
    const other = await issueCard(await newKey(), draft, 1)
    const lies: Array<[string, () => Promise<object>, string]> = [
      ['changed after signing', async () => ({ card: await mutated(liarKey, { tags: ['translate', 'trusted'] }) }), 'INVALID_SIGNATURE'],
      ['signed by another key', async () => ({ card: await forged(liarKey, await newKey()) }), 'INVALID_SIGNATURE'],
      ['another agent\'s genuine card', async () => ({ card: other }), 'INVALID_SIGNATURE'],
      ['the honest agent\'s card', async () => ({ card: honest.card }), 'INVALID_SIGNATURE'],
      ['expired', async () => ({ card: await expired(liarKey) }), 'INVALID_REQUEST'],
      ['unsigned', async () => ({ card: await unsigned(liarKey) }), 'INVALID_REQUEST'],
      ['over the card size cap', async () => ({ card: await oversized(liarKey) }), 'INVALID_REQUEST'],
      ['not a card', async () => ({ card: 'trust me' }), 'INVALID_REQUEST'],
      ['no card at all', async () => ({}), 'INVALID_REQUEST']
    ]
    for (const [what, answer, why] of lies) {
      lie = answer
      const rejectedBefore = reader.discovery.stats.rejectedCards
      const { code, details } = await codeOf(reader.discovery.getCard(liar.agentId, { fresh: true }))
      expect(code, what).toBe('AGENT_NOT_FOUND')
      expect(details.peer_error, what).toBe(why)
      // it answered, so it gets no DHT lookup: a lie costs one round trip, not a query
      expect(details.reason, what).toBe('invalid_card')
      expect(details.dht_error, what).toBeUndefined()
      expect(reader.discovery.stats.rejectedCards, what).toBeGreaterThan(rejectedBefore)
      for (const q of [byVersion, byId, byTag]) {
        expect(ids(await reader.discover(q, { fresh: true })), what).toEqual([honest.agentId])
      }
    }
  })

  it('a peer that answers with broken frames, or not at all, yields a typed error and discover still returns the honest agent', async () => {
    lie = async () => ({ card: await mutated(liarKey) })
    // Broken frames are INVALID_REQUEST. A peer that goes silent, before or inside
    // a frame, is unavailable: TIMEOUT, or AGENT_NOT_FOUND with reason timeout,
    // and a frame left half-written may instead be cut off as truncated.
    const silent = ['TIMEOUT', 'AGENT_NOT_FOUND']
    const cases: Array<[typeof rawMode, string[]]> = [
      ['garbage', ['INVALID_REQUEST']],
      ['huge', ['INVALID_REQUEST']],
      ['connection-error', ['INVALID_REQUEST']],
      ['partial', [...silent, 'INVALID_REQUEST']],
      ['stall', silent]
    ]
    for (const [mode, why] of cases) {
      rawMode = mode
      const { code, details } = await codeOf(reader.discovery.getCard(broken.agentId, { fresh: true }))
      expect(code, mode).toBe('AGENT_NOT_FOUND')
      expect(why, `${mode}: ${JSON.stringify(details)}`).toContain(details.peer_error)
      if (details.peer_error === 'AGENT_NOT_FOUND') expect(details.peer_reason, mode).toBe('timeout')
      const found = await reader.discover(byVersion, { fresh: true })
      expect(ids(found), mode).toEqual([honest.agentId])
      expect(await verifyCard(found[0])).toEqual(honest.card)
    }
    // the caller's own deadline is honoured too
    rawMode = 'stall'
    const { code, details } = await codeOf(reader.discovery.getCard(broken.agentId, { fresh: true, signal: AbortSignal.timeout(300) }))
    expect(code).toBe('AGENT_NOT_FOUND')
    expect(details.reason).toBe('timeout')
  })

  it('an agent that takes the card call and never answers: its DHT record answers once the call has gone unanswered CARD_DHT_HEDGE_MS', async () => {
    rawMode = 'stall'
    // a card that matches none of this file's queries, so the discovers after this test are not changed by it
    const card = await issueCard(brokenKey, { name: 'quiet', description: 'answers nothing', capabilities: [{ capability_id: 'cap:quiet', version: '1.0.0' }], tags: [] }, 1)
    let stored = 0
    for await (const ev of nodes[0]!.host.services.dht.put(cardRecordKey(broken.agentId), encodeCardRecord(card), { signal: AbortSignal.timeout(DHT_PUT_TIMEOUT_MS) })) {
      if (ev.name === 'PEER_RESPONSE' && ev.messageName === 'PUT_VALUE') stored++
    }
    expect(stored).toBeGreaterThan(0)
    const before = { ...reader.discovery.stats }
    const sources: string[] = []
    expect(await reader.discovery.getCard(broken.agentId, { fresh: true, source: s => { sources.push(s) } })).toEqual(card)
    expect(sources).toEqual(['dht'])
    expect(reader.discovery.stats.dhtHedges - before.dhtHedges).toBe(1)
    expect(reader.discovery.stats.fetchedCards - before.fetchedCards).toBe(0)
    // without the hedge (what a discover asks for), the record is read beside the call once it has gone
    // CARD_DHT_FALLBACK_AFTER_MS unanswered: counted as a fallback, not a hedge
    const unhedged = await reader.discovery.getCard(broken.agentId, { fresh: true, hedge: false })
    expect(unhedged).toEqual(card)
    expect(reader.discovery.stats.dhtHedges - before.dhtHedges).toBe(1)
    expect(reader.discovery.stats.dhtFallbacks - before.dhtFallbacks).toBe(2)
  })

  it('the first card of a stream arrives from the honest agent, and a stream stopped early leaves discovery usable', async () => {
    rawMode = 'stall'
    let first: AgentCard | undefined
    for await (const card of reader.discovery.discoverStream(byVersion, { fresh: true })) {
      first = card
      break
    }
    expect(first?.agent_id).toBe(honest.agentId)
    rawMode = 'garbage'
    expect(ids(await reader.discover(byTag))).toEqual([honest.agentId])
  })

  it('returns an empty list for capabilities, versions and tags nobody offers', async () => {
    rawMode = 'garbage'
    expect(await reader.discover({ capability: { capability_id: 'cap:nobody', version: '1.0.0' } })).toEqual([])
    expect(await reader.discover({ capability: { capability_id: 'cap:nobody', version: '*' } })).toEqual([])
    expect(await reader.discover({ capability: { capability_id: cap.capability_id, version: '0.0.1' } })).toEqual([])
    expect(await reader.discover({ tags: ['nobody-uses-this-tag'] })).toEqual([])
    // a provider record for the first tag is not enough: every tag must be on the card
    expect(await reader.discover({ tags: ['translate', 'vision'] })).toEqual([])
    expect(await reader.discover(byVersion, { limit: 0 })).toEqual([])
  })

  it('rejects a malformed query with INVALID_REQUEST', async () => {
    const bad: unknown[] = [
      {},
      { capability: null, tags: null },
      { tags: [] },
      { capability: { capability_id: '' } },
      { capability: { capability_id: 'cap translate' } },
      { capability: { capability_id: 'cap:translate', version: 'one point oh' } },
      { capability: { capability_id: 'cap:translate', extra: true } },
      { capability: 'cap:translate' },
      { tags: ['translate', 'not a tag'] },
      { tags: Array.from({ length: 9 }, (_, i) => `t${i}`) },
      { capability: { capability_id: 'cap:translate' }, everything: true },
      null,
      'cap:translate'
    ]
    for (const q of bad) {
      expect((await codeOf(reader.discover(q as DiscoveryQuery))).code, JSON.stringify(q)).toBe('INVALID_REQUEST')
      expect((await codeOf(reader.discovery.discoverStream(q as DiscoveryQuery).next())).code, JSON.stringify(q)).toBe('INVALID_REQUEST')
    }
  })

  it('lists each agent once, leaves itself out unless asked, and honours the limit', async () => {
    rawMode = 'garbage'
    const second = nodes[4]!
    await second.publishCard({ name: 'second', capabilities: [cap], tags: ['translate'] })
    expect(await second.discovery.announce()).toBeGreaterThan(0)
    const both = [honest.agentId, second.agentId].sort()
    expect(ids(await reader.discover(byId))).toEqual(both)
    expect(ids(await honest.discover(byId))).toEqual([second.agentId])
    const withSelf = await honest.discover(byId, { includeSelf: true })
    expect(withSelf[0]?.agent_id).toBe(honest.agentId)
    expect(ids(withSelf)).toEqual(both)
    expect(await reader.discover(byId, { limit: 1 })).toHaveLength(1)
    // a node that offers nothing matching is not added by includeSelf
    expect(ids(await reader.discover(byId, { includeSelf: true }))).toEqual(both)
  })
})
