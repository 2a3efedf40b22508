/**
 * A holder's card a discover made a result is verified and its agent backed,
 * so its seq guards every later answer: protocols/card.md, "A card older
 * (lower seq) than one already verified and unexpired is never returned".
 * Holders' cards are not cached (their agents may not exist), and before, the
 * seq of one was not kept either: the next discover, whose holders replayed
 * an older valid card of the agent, returned it (card-store.ts witness,
 * fetch-order.ts deliverVouched).
 */
import { createHash } from 'node:crypto'
import type { PeerId } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { afterAll, describe, expect, it } from 'vitest'
import { CARD_MAX_FRAME_BYTES, CARD_PROTOCOL } from '../src/constants.ts'
import { capabilityKey, issueCard, type AgentCard } from '../src/card/card.ts'
import { CardCache } from '../src/card/card-store.ts'
import { newDiscoveryStats } from '../src/card/discovery-stats.ts'
import { CardFetches } from '../src/card/fetch-order.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { componentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { kadRoutingTable } from '../src/wire/kad-internals.ts'
import { serve } from '../src/wire/rpc.ts'
import { draft, newKey } from './card-fixtures.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const cap = { capability_id: 'cap:held-rollback', version: '1.0.0' }

describe('CardCache.witness', () => {
  it('keeps the seq of a card it does not cache, drops an older cached card, and refuses an older one after', async () => {
    const key = await newKey()
    const [older, newer] = await Promise.all([issueCard(key, draft, 5), issueCard(key, draft, 7)])
    const cache = new CardCache()
    cache.remember(older)
    expect(cache.witness(newer)).toBe(newer)
    // the older card no longer answers for the agent, and the newer one is not cached
    expect(cache.fresh(older.agent_id)).toBeUndefined()
    expect(cache.newest(older)).toBeUndefined()
    expect(cache.witness(older)).toBeUndefined()
    expect(() => cache.remember(older)).toThrow(/stale/)
    // the agent's own answer is cached as before
    expect(cache.remember(newer)).toBe(newer)
    expect(cache.fresh(newer.agent_id)).toBe(newer)
  })
})

async function peer (): Promise<PeerId> { return peerIdFromString(agentIdOf(await newKey())) }

/**
 * One discover's CardFetches wired to the node's CardCache as discovery.ts
 * wires them: each holder in turn is asked by key and sends its card of the
 * agent, and `namer`'s DHT answer names the agent after the first holder's
 * answer; the agent itself cannot be reached.
 */
async function discoverOnce (cache: CardCache, sent: Array<[PeerId, AgentCard]>, namer: PeerId): Promise<AgentCard[]> {
  const fetches = new CardFetches<AgentCard>({
    self: await peer(),
    wanted: () => 1,
    matches: () => true,
    signal: AbortSignal.timeout(10_000),
    stopped: new AbortController().signal,
    connected: p => sent.some(([h]) => h.equals(p)) || p.equals(namer),
    known: p => cache.fresh(p.toString()) !== undefined,
    fetch: async () => { throw new Error('the agent is gone') },
    askKey: async (h, _s, onCard) => {
      const cards = sent.filter(([holder]) => holder.equals(h)).map(([, card]) => card)
      for (const card of cards) onCard(card)
      return cards
    },
    remember: (card, result) => result === true ? cache.witness(card) : cache.newest(card),
    stats: newDiscoveryStats(),
    log: componentLogger(undefined, 'test'),
    onChange: () => {}
  })
  const [first, ...rest] = sent
  fetches.askKey(first![0])
  fetches.add([peerIdFromString(first![1].agent_id)], namer)
  for (const [holder] of rest) fetches.askKey(holder)
  await until(() => fetches.idle, 'the discover ended')
  return fetches.ready
}

describe('CardFetches: the seq of a holder\'s card', () => {
  it('a newer card a holder sends after an older one was made the result guards the next discover', async () => {
    const key = await newKey()
    const [older, newer] = await Promise.all([issueCard(key, draft, 5), issueCard(key, draft, 7)])
    const cache = new CardCache()
    const namer = await peer()
    // the first holder's older card is backed by the namer and made the result before the second holder's newer one comes
    expect((await discoverOnce(cache, [[await peer(), older], [await peer(), newer]], namer)).map(c => c.seq)).toEqual([5])
    // the next discover's holder replays the older card: not the answer, and the agent cannot be reached
    expect(await discoverOnce(cache, [[await peer(), older]], namer)).toEqual([])
    expect(cache.fresh(older.agent_id)).toBeUndefined()
  })
})

describe('a discover after one that returned a holder\'s card', () => {
  const nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  it('never returns an older card of the agent that holders replay', async () => {
    const agentKey = await newKey()
    const started = await Promise.all(Array.from({ length: 4 }, async () => (await startMesh(1))[0]!))
    nodes.push(...started)
    const [asker, ...holders] = started as [MeshNode, ...MeshNode[]]
    const [agent] = await startMesh(1, { nodeOptions: () => ({ privateKey: agentKey }) })
    nodes.push(agent!)
    for (const h of holders) expect(await agent!.join(h.addresses)).toBe(1)
    // the agent signed an older card once; the card it publishes now has a higher seq (never below the clock)
    const older = await issueCard(agentKey, { ...draft, capabilities: [cap] }, 5)
    const newer = await agent!.publishCard({ ...draft, capabilities: [cap] })
    expect(newer.seq).toBeGreaterThan(older.seq)
    expect(await agent!.discovery.announce()).toBeGreaterThan(0)
    // the agent is gone: its card comes from the holders, or from its DHT record
    await agent!.stop()
    // the holders send the newer card, and later replay the older one (still valid, signed by the agent); the
    // asker's streams to them stay open between discovers, so the handler is the same throughout
    let sent = newer
    for (const h of holders) {
      await h.host.unhandle(CARD_PROTOCOL)
      await serve(h.host, {
        protocol: CARD_PROTOCOL,
        maxFrameBytes: CARD_MAX_FRAME_BYTES,
        methods: { get_held_cards: { handle: async () => ({ cards: [sent] }) } }
      })
    }
    for (const h of holders) expect(await asker.join(h.addresses)).toBe(1)
    // every holder is a contact of the asker's lookup, so two of them are asked by key and back each other's card
    const table = kadRoutingTable(asker.host.services.dht)!
    const kadId = createHash('sha256').update((await capabilityKey(cap.capability_id)).multihash.bytes).digest()
    await until(() => holders.every(h => table.closestPeers(kadId, { count: 20 }).some(p => p.equals(h.host.peerId))), 'the holders in the asker\'s routing table')

    const sources: string[] = []
    const first: AgentCard[] = await asker.discover({ capability: cap }, { limit: 1, explain: o => { sources.push(o.source) } })
    expect(first.map(c => c.seq)).toEqual([newer.seq])
    expect(sources).toEqual(['holder'])
    // nothing a holder sent is cached: the next discover asks the holders again
    expect(asker.discovery.knownCard(newer.agent_id)).toBeUndefined()

    sent = older
    const before = asker.discovery.stats.heldCardsReceived
    const second: AgentCard[] = await asker.discover({ capability: cap }, { limit: 1 })
    // the replay reached the asker, and was not the answer
    expect(asker.discovery.stats.heldCardsReceived).toBeGreaterThan(before)
    expect(second.map(c => c.seq)).not.toContain(older.seq)
  }, 120_000)
})
