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
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityKey } from '../src/card/card.ts'
import { CARD_HELD_SEED_MAX_CHARS, CARD_HELD_SEED_MIN_CHARS, CARD_MAX_FRAME_BYTES, CARD_PROTOCOL, DHT_PROVIDERS_PER_ANSWER } from '../src/constants.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { seededPick } from '../src/util/sample.ts'
import { ownProviderRecords } from '../src/wire/provider-answers.ts'
import { serve } from '../src/wire/rpc.ts'
import { newKey } from './card-fixtures.ts'
import { startMesh, stopAll } from './helpers.ts'

const ids = fc.uniqueArray(fc.string({ minLength: 1, maxLength: 12 }), { minLength: 0, maxLength: 60 })
const seed = fc.string({ minLength: CARD_HELD_SEED_MIN_CHARS, maxLength: CARD_HELD_SEED_MAX_CHARS })
const same = (x: string): string => x

describe('seededPick', () => {
  it('picks min(k, n) distinct items of the list, whatever its order', () => {
    fc.assert(fc.property(seed, ids, fc.integer({ min: 0, max: 30 }), fc.integer(), (s, xs, k, turn) => {
      const picked = seededPick(s, xs, k, same)
      expect(picked).toHaveLength(Math.min(k, xs.length))
      expect(new Set(picked).size).toBe(picked.length)
      for (const x of picked) expect(xs).toContain(x)
      // the list in another order: the same pick (when it picks some), in the same order
      const shifted = xs.map((_x, i) => xs[(i + Math.abs(turn)) % xs.length]!).reverse()
      if (xs.length > k) expect(seededPick(s, shifted, k, same)).toEqual(picked)
    }))
  })

  it('two holders given one seed pick the same of what they share: an item picked from a list is picked from any part of it that holds it', () => {
    fc.assert(fc.property(seed, ids, fc.integer({ min: 1, max: 30 }), fc.func(fc.boolean()), (s, xs, k, keep) => {
      const part = xs.filter(x => keep(x))
      const fromPart = new Set(seededPick(s, part, k, same))
      for (const x of seededPick(s, xs, k, same)) if (part.includes(x)) expect(fromPart.has(x)).toBe(true)
    }))
  })

  it('another seed picks others: no item is picked by every seed', () => {
    const xs = Array.from({ length: 250 }, (_x, i) => `12D3KooWagent${i}`)
    const seeds = Array.from({ length: 16 }, (_x, i) => `seed-${i}-0123456789abcdef`)
    const picks = seeds.map(s => new Set(seededPick(s, xs, DHT_PROVIDERS_PER_ANSWER, same)))
    const always = xs.filter(x => picks.every(p => p.has(x)))
    expect(always).toEqual([])
    // and between two seeds the picks differ (two picks of 20 of 250 share 1.6 on average)
    expect(picks[0]).not.toEqual(picks[1])
  })
})

interface ProviderStore { addProvider: (key: unknown, peer: PeerId) => Promise<void> }
const storeOf = (n: MeshNode): ProviderStore => (n.host.services.dht as unknown as { providers: ProviderStore }).providers
const cap = { capability_id: 'cap:seeded-pick', version: '1.0.0' }

describe('holders of one key, asked with one seed', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => { nodes = await startMesh(4, { transport: 'tcp' }) })
  afterAll(async () => { await stopAll(nodes) })

  it('name the same records, where a random pick names others; a holder that keeps fewer names those it shares with the others\' pick', async () => {
    const key = await capabilityKey(cap.capability_id)
    const [a, b, c] = nodes as [MeshNode, MeshNode, MeshNode]
    // 3 × DHT_PROVIDERS_PER_ANSWER providers whose records a and b keep; c keeps a part of them
    const providers = await Promise.all(Array.from({ length: 3 * DHT_PROVIDERS_PER_ANSWER }, async () => peerIdFromString(agentIdOf(await newKey()))))
    for (const [i, p] of providers.entries()) {
      for (const n of i % 3 === 0 ? [a, b, c] : [a, b]) {
        await storeOf(n).addProvider(key, p)
        await n.host.peerStore.merge(p, { multiaddrs: [multiaddr('/ip4/127.0.0.1/tcp/1')] })
      }
    }
    const read = (n: MeshNode, s?: string): Promise<string[]> => ownProviderRecords(n.host.services.dht)!(key, undefined, s).then(ps => ps.map(p => p.toString()))
    const s = 'AAAAbbbbCCCCdddd'
    const fromA = await read(a, s)
    expect(fromA).toHaveLength(DHT_PROVIDERS_PER_ANSWER)
    expect(await read(b, s)).toEqual(fromA)
    // what c shares of a's pick, c picks too
    const fromC = new Set(await read(c, s))
    const kept = new Set(providers.filter((_p, i) => i % 3 === 0).map(p => p.toString()))
    for (const id of fromA.filter(id => kept.has(id))) expect(fromC.has(id)).toBe(true)
    // without a seed each read is a fresh random pick: of a few, not all alike
    const randomReads = await Promise.all([1, 2, 3, 4].map(async () => (await read(a)).sort().join()))
    expect(new Set(randomReads).size).toBeGreaterThan(1)
  })

  it('a discover sends one seed to every contact it asks by key, and the next discover another', async () => {
    const asker = nodes[3]!
    const seen: Array<{ from: string, seed: unknown }> = []
    for (const n of nodes.slice(0, 3)) {
      await n.host.unhandle(CARD_PROTOCOL)
      await serve(n.host, {
        protocol: CARD_PROTOCOL,
        maxFrameBytes: CARD_MAX_FRAME_BYTES,
        methods: {
          get_card: { handle: async () => ({ card: n.card }) },
          get_held_cards: {
            handle: async (body) => {
              const b = body as { key?: string, seed?: unknown }
              if (b.key !== undefined) seen.push({ from: n.agentId, seed: b.seed })
              return { cards: [] }
            }
          }
        }
      })
    }
    // contacts are connections the asker opened: one to each
    for (const n of nodes.slice(0, 3)) await asker.host.dial(n.host.peerId)
    const seeds: unknown[] = []
    for (let i = 0; i < 2; i++) {
      seen.length = 0
      await asker.discover({ capability: { capability_id: 'cap:nobody-offers-this', version: '1.0.0' } }, { limit: 1, cache: false, timeoutMs: 5_000 })
      // the two contacts asked at once (CARD_KEY_ASKS_AT_ONCE), and the next when they sent too few
      expect(new Set(seen.map(x => x.from)).size).toBeGreaterThanOrEqual(2)
      expect(new Set(seen.map(x => x.seed)).size).toBe(1)
      expect(seen[0]!.seed).toMatch(new RegExp(`^[A-Za-z0-9_-]{${CARD_HELD_SEED_MIN_CHARS}}$`))
      seeds.push(seen[0]!.seed)
    }
    expect(seeds[0]).not.toBe(seeds[1])
  })
})
