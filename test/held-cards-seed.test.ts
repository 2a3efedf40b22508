/**
 * get_held_cards by key with the asker's seed (protocols/card.md): a holder
 * that keeps more records of a key than an answer names picks them by the
 * seed's ranks, so the contacts one discover asks, which keep much the same
 * records, send the cards of the same agents and back each other's. With
 * independent random picks two contacts named fewer of the same agents the
 * more providers a key had (the sim's capabilities have N/2 each), and the
 * discover went on to DHT answers and dials for cards it already held.
 */
import fc from 'fast-check'
import type { PeerId } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import type { CID } from 'multiformats/cid'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityKey, issueCard, type AgentCard } from '../src/card/card.ts'
import { askHolder, heldSeed, type HeldCards } from '../src/card/held-cards.ts'
import { CARD_HELD_SEED_BYTES, CARD_HELD_SEED_MAX_CHARS, CARD_HELD_SEED_MIN_CHARS } from '../src/card/constants.ts'
import { CARD_HELD_ASK_MAX, CARD_MAX_FRAME_BYTES, CARD_PROTOCOL, DHT_PROVIDERS_PER_ANSWER } from '../src/constants.ts'
import { InvalidRequestError } from '../src/errors.ts'
import { componentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { seededPick, seededRank } from '../src/util/sample.ts'
import { ownProviderRecords } from '../src/wire/provider-answers.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { draft, newKey } from './card-fixtures.ts'
import { contactsOf, serveHeldByKey } from './held-fixtures.ts'
import { startMesh, stopAll } from './helpers.ts'

const ids = fc.uniqueArray(fc.string({ minLength: 1, maxLength: 12 }), { minLength: 0, maxLength: 60 })
const seed = fc.string({ minLength: CARD_HELD_SEED_MIN_CHARS, maxLength: CARD_HELD_SEED_MAX_CHARS })
const same = (x: string): string => x

describe('seededPick', () => {
  it('the seed an asker makes is one a holder takes', () => {
    const s = heldSeed()
    expect(s.length).toBe(Math.ceil(CARD_HELD_SEED_BYTES * 4 / 3))
    expect(s.length).toBeGreaterThanOrEqual(CARD_HELD_SEED_MIN_CHARS)
    expect(s.length).toBeLessThanOrEqual(CARD_HELD_SEED_MAX_CHARS)
    expect(s).toMatch(/^[A-Za-z0-9_-]+$/)
  })

  it('picks min(k, n) distinct items of the list, whatever its order', () => {
    fc.assert(fc.property(seed, ids, fc.integer({ min: 0, max: 30 }), fc.integer(), (s, xs, k, turn) => {
      const picked = seededPick(s, xs, k, same)
      expect(picked).toHaveLength(Math.min(k, xs.length))
      expect(new Set(picked).size).toBe(picked.length)
      for (const x of picked) expect(xs).toContain(x)
      // the list in another order: the same pick (when it picks some), in the same order
      const shifted = xs.map((_x, i) => xs[(i + Math.abs(turn)) % xs.length]!).reverse()
      if (xs.length > k) expect(seededPick(s, shifted, k, same)).toEqual(picked)
      // lowest first: a smaller pick is the start of a larger one
      if (xs.length > k + 1) expect(seededPick(s, xs, xs.length - 1, same).slice(0, k)).toEqual(picked)
    }))
  })

  it('picks what a full sort by (rank, id) picks, duplicates and any count included', () => {
    const items = fc.array(fc.record({ id: fc.string({ minLength: 1, maxLength: 4 }), n: fc.nat() }), { maxLength: 50 })
    const counts = fc.oneof(fc.integer({ min: -3, max: 55 }), fc.double({ min: -2, max: 55, noNaN: true }))
    fc.assert(fc.property(seed, items, counts, (s, xs, most) => {
      const k = Math.floor(most)
      const sorted = xs.map((x, i) => ({ x, i, rank: seededRank(s, x.id) }))
        .sort((a, b) => a.rank - b.rank || (a.x.id < b.x.id ? -1 : a.x.id > b.x.id ? 1 : 0) || a.i - b.i)
      const want = xs.length <= k ? xs : sorted.slice(0, Math.max(0, k)).map(r => r.x)
      expect(seededPick(s, xs, most, x => x.id)).toEqual(want)
    }), { numRuns: 500 })
  })

  it('two holders given one seed pick the same of what they share: an item picked from a list is picked from any part of it that holds it', () => {
    fc.assert(fc.property(seed, ids, fc.integer({ min: 1, max: 30 }), fc.func(fc.boolean()), (s, xs, k, keep) => {
      const part = xs.filter(x => keep(x))
      const fromPart = new Set(seededPick(s, part, k, same))
      for (const x of seededPick(s, xs, k, same)) if (part.includes(x)) expect(fromPart.has(x)).toBe(true)
    }))
  })

  it('another seed picks others: over many seeds every item is picked about as often', () => {
    const xs = Array.from({ length: 250 }, (_x, i) => `12D3KooWagent${i}`)
    const times = new Map(xs.map(x => [x, 0]))
    const picks: string[][] = []
    for (let i = 0; i < 400; i++) {
      const pick = seededPick(`seed-${i}-0123456789abcdef`, xs, DHT_PROVIDERS_PER_ANSWER, same)
      picks.push(pick)
      for (const x of pick) times.set(x, times.get(x)! + 1)
    }
    // 400 picks of 20 of 250: each item 32 times on average (binomial, sd 5.4); the seeds are fixed, so is the count
    for (const [x, n] of times) expect(n, x).toBeGreaterThanOrEqual(8)
    for (const [x, n] of times) expect(n, x).toBeLessThanOrEqual(70)
    expect(picks[0]).not.toEqual(picks[1])
  })
})

interface ProviderStore { addProvider: (key: unknown, peer: PeerId) => Promise<void> }
const storeOf = (n: MeshNode): ProviderStore => (n.host.services.dht as unknown as { providers: ProviderStore }).providers
const heldOf = (n: MeshNode): HeldCards => (n.discovery as unknown as { held: HeldCards }).held
const cap = { capability_id: 'cap:seeded-pick', version: '1.0.0' }
const log = componentLogger(undefined, 'test')

describe('holders of one key, asked with one seed', () => {
  let nodes: MeshNode[] = []
  let key: CID
  /** 3 × DHT_PROVIDERS_PER_ANSWER agents whose records and cards a and b keep; c keeps 2 of every 3 of them. */
  let cards: AgentCard[] = []
  beforeAll(async () => {
    nodes = await startMesh(4, { transport: 'tcp' })
    key = await capabilityKey(cap.capability_id)
    const [a, b, c] = nodes as [MeshNode, MeshNode, MeshNode]
    cards = await Promise.all(Array.from({ length: 3 * DHT_PROVIDERS_PER_ANSWER }, async () => issueCard(await newKey(), draft, 1)))
    for (const [i, card] of cards.entries()) {
      const p = peerIdFromString(card.agent_id)
      for (const n of i % 3 === 0 ? [a, b] : [a, b, c]) {
        await storeOf(n).addProvider(key, p)
        await n.host.peerStore.merge(p, { multiaddrs: [multiaddr('/ip4/127.0.0.1/tcp/1')] })
        heldOf(n).hold(card)
      }
    }
  })
  afterAll(async () => { await stopAll(nodes) })

  it('name the records that rank lowest under the seed, the same at each, and another seed others; a holder that keeps fewer names those it shares with the others\' pick', async () => {
    const [a, b, c] = nodes as [MeshNode, MeshNode, MeshNode]
    const read = async (n: MeshNode, s?: string): Promise<string[]> => (await ownProviderRecords(n.host.services.dht)!(key, undefined, s)).map(p => p.toString())
    const all = cards.map(x => x.agent_id)
    const s = 'AAAAbbbbCCCCdddd'
    const fromA = await read(a, s)
    expect(fromA).toEqual(seededPick(s, all, DHT_PROVIDERS_PER_ANSWER, same))
    expect(await read(b, s)).toEqual(fromA)
    expect(await read(a, 'eeeeFFFFggggHHHH')).not.toEqual(fromA)
    // c keeps 40 of the 60, more than an answer names: what it keeps of a's pick, it picks too
    const kept = new Set(all.filter((_x, i) => i % 3 !== 0))
    const fromC = new Set(await read(c, s))
    expect(fromC.size).toBe(DHT_PROVIDERS_PER_ANSWER)
    const shared = fromA.filter(id => kept.has(id))
    expect(shared.length).toBeGreaterThan(0)
    for (const id of shared) expect(fromC.has(id)).toBe(true)
    // without a seed each read is a fresh random pick: of a few, not all alike
    const randomReads = await Promise.all([1, 2, 3, 4].map(async () => (await read(a)).sort().join()))
    expect(new Set(randomReads).size).toBeGreaterThan(1)
  })

  it('get_held_cards by key with a seed: the cards of the seed\'s pick, lowest rank first, from either holder', async () => {
    const asker = nodes[3]!
    const client = new RpcClient(asker.host, { protocol: CARD_PROTOCOL, maxFrameBytes: CARD_MAX_FRAME_BYTES, log })
    const s = heldSeed()
    const want = seededPick(s, cards.map(x => x.agent_id), DHT_PROVIDERS_PER_ANSWER, same)
    for (const holder of nodes.slice(0, 2)) {
      const got = (await askHolder(client, holder.host.peerId, { key, seed: s }, AbortSignal.timeout(10_000), (err) => { throw err })).map(x => x.agent_id)
      // as many as fit in one frame (CARD_MAX_FRAME_BYTES), CARD_HELD_ASK_MAX at most
      expect(got.length).toBeGreaterThanOrEqual(8)
      expect(got.length).toBeLessThanOrEqual(CARD_HELD_ASK_MAX)
      expect(got).toEqual(want.slice(0, got.length))
    }
  })

  it('a discover sends one seed to the contacts it asks at once, another to the contact it asks after them, and the next discover others; a holder from before the seed is asked again without it', async () => {
    const asker = nodes[3]!
    const seen: Array<{ from: string, seed: unknown }> = []
    // a holder from before the seed (nodes[0] once `old` is set): refuses it as its schema did (no other member)
    let old: MeshNode | undefined
    const oldCard = cards[0]!
    for (const n of nodes.slice(0, 3)) {
      await serveHeldByKey(n, async (b) => {
        seen.push({ from: n.agentId, seed: b.seed })
        if (n === old && b.seed !== undefined) throw new InvalidRequestError('get_held_cards: unknown member seed')
        return { cards: n === old ? [oldCard] : [] }
      })
    }
    // the lookup's first round asks all three
    await contactsOf(asker, nodes.slice(0, 3))
    const seeds = new Set<unknown>()
    for (let i = 0; i < 2; i++) {
      seen.length = 0
      await asker.discover({ capability: { capability_id: 'cap:nobody-offers-this', version: '1.0.0' } }, { limit: 1, cache: false, timeoutMs: 5_000 })
      // the two asked at once (CARD_KEY_ASKS_AT_ONCE) sent no card: the third was asked next, with a seed of its own
      const bySeed = Map.groupBy(seen, x => x.seed)
      expect(seen.map(x => x.from).sort()).toEqual(nodes.slice(0, 3).map(n => n.agentId).sort())
      expect([...bySeed.values()].map(x => x.length).sort()).toEqual([1, 2])
      for (const x of seen) expect(x.seed).toMatch(new RegExp(`^[A-Za-z0-9_-]{${CARD_HELD_SEED_MIN_CHARS}}$`))
      for (const x of bySeed.keys()) seeds.add(x)
    }
    expect(seeds.size).toBe(4)

    old = nodes[0]!
    seen.length = 0
    const client = new RpcClient(asker.host, { protocol: CARD_PROTOCOL, maxFrameBytes: CARD_MAX_FRAME_BYTES, log })
    const got = await askHolder(client, old.host.peerId, { key, seed: heldSeed() }, AbortSignal.timeout(10_000), (err) => { throw err })
    expect(got).toEqual([oldCard])
    expect(seen.map(x => x.seed === undefined)).toEqual([false, true])
  })
})
