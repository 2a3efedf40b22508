/**
 * get_held_cards by key (protocols/card.md): a discover asks the contact its
 * lookup asks first, at the same time as the GET_PROVIDERS, for the cards it
 * holds of the providers of the query's key. Before, the held cards came
 * only after that contact's DHT answer had named the providers: a second
 * round trip to the same peer before the first verified card. A card it sends
 * is a result when a source other than that contact backs its agent (a
 * connection to the agent, another contact's answer, its own card); else the
 * agent is asked itself.
 */
import { createHash } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import type { PeerId } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { CARD_MAX_FRAME_BYTES, CARD_PROTOCOL } from '../src/constants.ts'
import { capabilityKey, issueCard, type AgentCard } from '../src/card/card.ts'
import { newDiscoveryStats, type DiscoveryStats } from '../src/card/discovery-stats.ts'
import type { CardOrigin } from '../src/card/discovery.ts'
import { CardFetches, type CardFetchesInit } from '../src/card/fetch-order.ts'
import { askHolder } from '../src/card/held-cards.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { componentLogger } from '../src/logger.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { kadRoutingTable } from '../src/wire/kad-internals.ts'
import type { MeshNode } from '../src/node.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { draft, forged, newKey } from './card-fixtures.ts'
import { rejectsWith, startLoopbackHost, startMesh, stopAll, until } from './helpers.ts'

// the cases count where cards came from (holders, agents, the DHT): a holder's answer by key that a busy machine
// delayed past CARD_HELD_ASK_TIMEOUT_MS (500 ms) sent the discover to the agents instead. No case here is about
// that limit
vi.mock('../src/constants.ts', async (orig) => ({ ...(await orig<typeof import('../src/constants.ts')>()), CARD_HELD_ASK_TIMEOUT_MS: 10_000 }))
// and the first case counts no walk: when the holder's DHT answer comes before its cards, the lookup waits
// DHT_LOOKUP_PATIENCE_MS (1 s) for them, then walks. No case here is about that wait either
vi.mock('../src/wire/network-constants.ts', async (orig) => ({ ...(await orig<typeof import('../src/wire/network-constants.ts')>()), DHT_LOOKUP_PATIENCE_MS: 10_000 }))

const log = componentLogger(undefined, 'test')
const cap = { capability_id: 'cap:by-key', version: '1.0.0' }

async function cardOf (): Promise<AgentCard> {
  return issueCard(await newKey(), draft, 1)
}

/** A discover's CardFetches with what a case sets (every card matches, none is cached); `ended` once nothing waits or is in flight. */
async function cardFetches (init: Pick<CardFetchesInit<AgentCard>, 'wanted' | 'connected' | 'fetch' | 'askKey'> & Partial<CardFetchesInit<AgentCard>>): Promise<{ fetches: CardFetches<AgentCard>, stats: DiscoveryStats, ended: Promise<void> }> {
  const stats = newDiscoveryStats()
  const ended = Promise.withResolvers<void>()
  const fetches: CardFetches<AgentCard> = new CardFetches<AgentCard>({
    self: peerIdFromString(agentIdOf(await newKey())),
    matches: () => true,
    signal: AbortSignal.timeout(10_000),
    stopped: new AbortController().signal,
    known: () => false,
    remember: c => c,
    log,
    stats,
    onChange: () => { if (fetches.idle) ended.resolve() },
    ...init
  })
  return { fetches, stats, ended: ended.promise }
}

/** A new node that joined through `holder`, with the holder in its routing table (what the lookup of `capabilityId` asks first). */
async function askerThrough (holder: MeshNode, capabilityId: string, nodes: MeshNode[]): Promise<MeshNode> {
  const [asker] = await startMesh(1, { transport: 'tcp' })
  nodes.push(asker!)
  expect(await asker!.join(holder.addresses)).toBe(1)
  const table = kadRoutingTable(asker!.host.services.dht)!
  const kadId = createHash('sha256').update((await capabilityKey(capabilityId)).multihash.bytes).digest()
  await until(() => table.closestPeers(kadId, { count: 20 }).some(p => p.equals(holder.host.peerId)), 'the holder in the asker\'s routing table')
  return asker!
}

describe('a discover asks its first contact for the cards it holds under the key', () => {
  const nodes: MeshNode[] = []
  let holder: MeshNode
  let agents: MeshNode[] = []
  let cards: AgentCard[] = []
  beforeAll(async () => {
    // a holder, and three agents that announced through it; they ask the DHT but do not serve it, so an asker's
    // only DHT contact is the holder, the one its lookup asks first and by key
    const [h, ...rest] = await Promise.all([0, 1, 2, 3].map(async (i) => (await startMesh(1, { transport: 'tcp', nodeOptions: () => i === 0 ? {} : { dht: { clientMode: true } } }))[0]!))
    holder = h!
    agents = rest
    nodes.push(holder, ...agents)
    for (const a of agents) expect(await a.join(holder.addresses)).toBe(1)
    cards = await Promise.all(agents.map(async (a, i) => a.publishCard({ ...draft, name: `agent-${i}`, capabilities: [cap] })))
    await Promise.all(agents.map(async a => a.discovery.announce()))
    await until(() => holder.discovery.stats.heldCardPulls >= agents.length, 'the holder to pull the three cards')
  })
  afterAll(async () => { await stopAll(nodes) })

  const newAsker = async (): Promise<MeshNode> => askerThrough(holder, cap.capability_id, nodes)

  it('gets every card from that one ask when it holds connections to the agents: no ask by agent afterwards, no fetch, no dial', async () => {
    const asker = await newAsker()
    // connections to the agents (it talked to them before) back the holder's word that they exist; the holder's
    // cards still spare a round trip to each
    for (const a of agents) expect(await asker.join(a.addresses)).toBe(1)
    let dials = 0
    asker.host.addEventListener('connection:open', (evt) => { if (evt.detail.direction === 'outbound') dials++ })
    const origins: CardOrigin[] = []
    const before = { ...asker.discovery.stats }
    const served = holder.discovery.stats.heldKeyAnswers
    // as many as there are: the discover ends on the third card
    const found = await asker.discover({ capability: cap }, { limit: cards.length, explain: (o) => { origins.push(o) } })
    const added = (k: keyof typeof before): number => asker.discovery.stats[k] - before[k]
    expect(found.map(c => c.agent_id).sort()).toEqual(cards.map(c => c.agent_id).sort())
    expect(origins.map(o => [o.agent_id, o.source, o.named_by]).sort()).toEqual(cards.map(c => [c.agent_id, 'holder', holder.agentId]).sort())
    expect(added('heldKeyAsks')).toBe(1)
    expect(added('heldKeyAskFailures')).toBe(0)
    // the holder's DHT answer named the same three: it waited for the cards, and nothing more was asked
    expect(added('heldCardAsks')).toBe(0)
    expect(added('fetchedCards')).toBe(0)
    // the discover ended on the cards, with the lookup's first ask still out: it does not walk (dialing) after that
    expect(added('lookupWalks')).toBe(0)
    expect(dials).toBe(0)
    expect(holder.discovery.stats.heldKeyAnswers - served).toBe(1)
  })

  it('without it (byKey: false) the cards take the ask by agent after the DHT answer, as before', async () => {
    const asker = await newAsker()
    const before = { ...asker.discovery.stats }
    const found = await asker.discover({ capability: cap }, { byKey: false })
    expect(found).toHaveLength(cards.length)
    expect(asker.discovery.stats.heldKeyAsks - before.heldKeyAsks).toBe(0)
    expect(asker.discovery.stats.heldCardAsks - before.heldCardAsks).toBe(1)
    // no connection to the agents and nobody else names them: the holder's cards are held back, the agents asked
    expect(asker.discovery.stats.heldCardsUnbacked - before.heldCardsUnbacked).toBe(cards.length)
  })

  it('answers a key it keeps no records of with no cards, and a bad ask with INVALID_REQUEST', async () => {
    const host: MeshHost = await startLoopbackHost()
    const client = new RpcClient(host, { protocol: CARD_PROTOCOL, maxFrameBytes: CARD_MAX_FRAME_BYTES })
    try {
      await host.peerStore.merge(holder.host.peerId, { multiaddrs: holder.host.getMultiaddrs() })
      const other = await capabilityKey('cap:nobody-offers-this')
      expect(await client.call(holder.host.peerId, 'get_held_cards', { key: other.toString() })).toEqual({ cards: [] })
      const key = (await capabilityKey(cap.capability_id)).toString()
      const got = await client.call(holder.host.peerId, 'get_held_cards', { key }) as { cards: AgentCard[] }
      expect(got.cards.map(c => c.agent_id).sort()).toEqual(cards.map(c => c.agent_id).sort())
      // one of the two forms, never both; a key is a base32 CID
      await rejectsWith(client.call(holder.host.peerId, 'get_held_cards', { key, agents: [cards[0]!.agent_id] }), 'INVALID_REQUEST')
      await rejectsWith(client.call(holder.host.peerId, 'get_held_cards', { key: 'not a key' }), 'INVALID_REQUEST')
      await rejectsWith(client.call(holder.host.peerId, 'get_held_cards', { key: 'b' + 'a'.repeat(40) }), 'INVALID_REQUEST')
    } finally {
      client.close()
      await host.stop()
    }
  })
})

describe('what a holder sends by key', () => {
  it('askHolder by key verifies every card and takes one per agent: a forged one and a repeat are rejected', async () => {
    const good = await cardOf()
    const victim = await newKey()
    const bad = await forged(victim, await newKey(), 2)
    const client = { call: async () => ({ cards: [good, bad, good] }) } as unknown as RpcClient
    const reasons: string[] = []
    const got = await askHolder(client, peerIdFromString(agentIdOf(await newKey())), { key: await capabilityKey(cap.capability_id) }, AbortSignal.timeout(5_000), err => { reasons.push(String(err.details?.reason)) })
    expect(got).toEqual([good])
    expect(reasons).toEqual(['bad_signature', 'not_asked'])
  })

  it('CardFetches: the holder\'s named providers wait for its cards; only those it did not send are fetched, and nobody is dialed meanwhile', async () => {
    const cards = await Promise.all([1, 2, 3].map(async () => cardOf()))
    const self = peerIdFromString(agentIdOf(await newKey()))
    const selfCard = { ...cards[0]!, agent_id: self.toString() }
    const holder = peerIdFromString(agentIdOf(await newKey()))
    // a second contact, asked by key too, that holds none of these cards
    const other = peerIdFromString(agentIdOf(await newKey()))
    const fetched: string[] = []
    const answer = Promise.withResolvers<void>()
    const { fetches, stats, ended } = await cardFetches({
      self,
      wanted: () => 10,
      connected: p => p.equals(holder) || p.equals(other),
      fetch: async (p) => { fetched.push(p.toString()); return cards.find(c => c.agent_id === p.toString())! },
      ask: async () => { throw new Error('no ask by agent: the holder was asked by key') },
      // the holder sends the first card, this node's own (never a result), and nothing of the other two
      askKey: async (h, _s, onCard) => {
        await answer.promise
        if (h.equals(other)) return []
        onCard(cards[0]!)
        onCard(selfCard)
        return [cards[0]!, selfCard]
      }
    })
    fetches.askKey(holder)
    fetches.askKey(other)
    fetches.add(cards.map(c => peerIdFromString(c.agent_id)), holder)
    // the other contact's DHT answer names the first agent too: that name counts at once, while its answer by key
    // is out, and backs the holder's card of that agent (the holder's word alone would not: fetch-order.ts fromHolder)
    fetches.add([peerIdFromString(cards[0]!.agent_id)], other)
    // the answers by key are out: nothing fetched yet, though the holder's answer named three
    expect(fetched).toEqual([])
    expect(fetches.idle).toBe(false)
    answer.resolve()
    await ended
    expect(fetches.ready.map(c => c.agent_id).sort()).toEqual(cards.map(c => c.agent_id).sort())
    expect(fetched.sort()).toEqual(cards.slice(1).map(c => c.agent_id).sort())
    expect(stats.heldKeyAsks).toBe(2)
    expect(stats.heldCardsReceived).toBe(1)
    expect(stats.heldCardsUnbacked).toBe(0)
    expect(fetches.spent).toBe(0)
  })

  it('CardFetches: the first two contacts are asked by key at once; a first that sends fewer cards than wanted (forged ones, say) waits for the second, before any dial', async () => {
    const cards = await Promise.all([1, 2, 3].map(async () => cardOf()))
    const [first, second, third] = await Promise.all([1, 2, 3].map(async () => peerIdFromString(agentIdOf(await newKey())))) as [PeerId, PeerId, PeerId]
    const fetched: string[] = []
    const asked: string[] = []
    const secondAnswers = Promise.withResolvers<void>()
    let firstAnswered = false
    const { fetches, stats, ended } = await cardFetches({
      // three cards wanted in all
      wanted: () => 3,
      connected: p => p.equals(first) || p.equals(second) || p.equals(third),
      fetch: async (p) => { fetched.push(p.toString()); return cards.find(c => c.agent_id === p.toString())! },
      // the first contact sends nothing that verifies (askHolder hands on only verified cards); the second all three
      askKey: async (h, _s, onCard) => {
        asked.push(h.toString())
        if (h.equals(first)) { firstAnswered = true; return [] }
        await secondAnswers.promise
        for (const c of cards) onCard(c)
        return cards
      }
    })
    // the lookup's first round: the first contact is asked by key with its GET_PROVIDERS, and the second with it
    fetches.contacts([first, second, third])
    expect(asked).toEqual([first.toString(), second.toString()])
    // the first contact's DHT answer named the three agents
    fetches.add(cards.map(c => peerIdFromString(c.agent_id)), first)
    await until(() => firstAnswered, 'the first contact to answer')
    // the first answered with nothing, the second's answer is out: the agents the first named are not dialed
    // meanwhile, and no third contact is asked while the second may still send them
    expect(fetched).toEqual([])
    expect(asked).toHaveLength(2)
    secondAnswers.resolve()
    await ended
    expect(fetches.ready.map(c => c.agent_id).sort()).toEqual(cards.map(c => c.agent_id).sort())
    expect(fetched).toEqual([])
    // the second sent enough: the third is never asked
    expect(asked).toHaveLength(2)
    expect(stats.heldKeyAsks).toBe(2)
    expect(stats.heldKeyAsksNext).toBe(0)
  })

  it('CardFetches: when both contacts asked at once leave cards wanted, the next contact is asked by key, before any dial', async () => {
    const cards = await Promise.all([1, 2].map(async () => cardOf()))
    const contacts = await Promise.all([1, 2, 3].map(async () => peerIdFromString(agentIdOf(await newKey())))) as [PeerId, PeerId, PeerId]
    const [first, second, third] = contacts
    const fetched: string[] = []
    const asked: string[] = []
    const { fetches, stats, ended } = await cardFetches({
      wanted: () => 2,
      connected: p => contacts.some(c => c.equals(p)),
      fetch: async (p) => { fetched.push(p.toString()); return cards.find(c => c.agent_id === p.toString())! },
      // the first two hold nothing; the third sends both cards, which the first's DHT answer named (backed)
      askKey: async (h, _s, onCard) => {
        asked.push(h.toString())
        if (!h.equals(third)) return []
        for (const c of cards) onCard(c)
        return cards
      }
    })
    fetches.contacts(contacts)
    fetches.add(cards.map(c => peerIdFromString(c.agent_id)), first)
    await ended
    expect(asked).toEqual([first, second, third].map(String))
    expect(fetches.ready.map(c => c.agent_id).sort()).toEqual(cards.map(c => c.agent_id).sort())
    expect(fetched).toEqual([])
    expect(stats.heldKeyAsks).toBe(3)
    expect(stats.heldKeyAsksNext).toBe(1)
  })

  it('CardFetches: contacts that send every card wanted at once are the only ones asked by key', async () => {
    const cards = await Promise.all([1, 2].map(async () => cardOf()))
    const [first, second, third] = await Promise.all([1, 2, 3].map(async () => peerIdFromString(agentIdOf(await newKey())))) as [PeerId, PeerId, PeerId]
    const asked: string[] = []
    const { fetches, stats, ended } = await cardFetches({
      wanted: () => 2,
      connected: () => true,
      fetch: async () => { throw new Error('no fetch: the contacts asked at once sent every card') },
      askKey: async (h, _s, onCard) => {
        asked.push(h.toString())
        for (const c of cards) onCard(c)
        return cards
      }
    })
    fetches.contacts([first, second, third])
    await ended
    expect(fetches.ready).toHaveLength(2)
    expect(asked).toEqual([first.toString(), second.toString()])
    expect(stats.heldKeyAsksNext).toBe(0)
  })

  it('CardFetches: an ask by key that fails leaves every named provider to its agent', async () => {
    const cards = await Promise.all([1, 2].map(async () => cardOf()))
    const holder = peerIdFromString(agentIdOf(await newKey()))
    const fetched: PeerId[] = []
    const { fetches, stats, ended } = await cardFetches({
      wanted: () => 10,
      connected: () => true,
      fetch: async (p) => { fetched.push(p); return cards.find(c => c.agent_id === p.toString())! },
      askKey: async () => { throw new Error('holder gone') }
    })
    fetches.askKey(holder)
    fetches.add(cards.map(c => peerIdFromString(c.agent_id)), holder)
    await ended
    expect(fetches.ready).toHaveLength(2)
    expect(fetched).toHaveLength(2)
    expect(stats.heldKeyAskFailures).toBe(1)
  })
})

describe('a holder that provides the key itself', () => {
  const nodes: MeshNode[] = []
  const own = { capability_id: 'cap:by-key-own', version: '1.0.0' }
  let holder: MeshNode
  let agent: MeshNode
  let holderCard: AgentCard
  let agentCard: AgentCard
  beforeAll(async () => {
    // the agent asks the DHT but does not serve it: an asker's only DHT contact is the holder, so the holder is the one asked by key
    const [h, a] = await Promise.all([0, 1].map(async (i) => (await startMesh(1, { transport: 'tcp', nodeOptions: () => i === 0 ? {} : { dht: { clientMode: true } } }))[0]!))
    holder = h!
    agent = a!
    nodes.push(holder, agent)
    expect(await agent.join(holder.addresses)).toBe(1)
    holderCard = await holder.publishCard({ ...draft, name: 'holder', capabilities: [own] })
    agentCard = await agent.publishCard({ ...draft, name: 'agent', capabilities: [own] })
    await agent.discovery.announce()
    await until(() => holder.discovery.stats.heldCardPulls >= 1, 'the holder to pull the agent\'s card')
  })
  afterAll(async () => { await stopAll(nodes) })

  it('sends its own card first by key, and when asked for its agent, once; not for a key it does not provide', async () => {
    const host: MeshHost = await startLoopbackHost()
    const client = new RpcClient(host, { protocol: CARD_PROTOCOL, maxFrameBytes: CARD_MAX_FRAME_BYTES })
    try {
      await host.peerStore.merge(holder.host.peerId, { multiaddrs: holder.host.getMultiaddrs() })
      const key = (await capabilityKey(own.capability_id)).toString()
      const byKey = await client.call(holder.host.peerId, 'get_held_cards', { key }) as { cards: AgentCard[] }
      expect(byKey.cards.map(c => c.agent_id)).toEqual([holderCard.agent_id, agentCard.agent_id])
      expect(byKey.cards[0]).toEqual(holderCard)
      const byAgent = await client.call(holder.host.peerId, 'get_held_cards', { agents: [agentCard.agent_id, holderCard.agent_id] }) as { cards: AgentCard[] }
      expect(byAgent.cards.map(c => c.agent_id)).toEqual([holderCard.agent_id, agentCard.agent_id])
      const other = (await capabilityKey(cap.capability_id)).toString()
      expect(await client.call(holder.host.peerId, 'get_held_cards', { key: other })).toEqual({ cards: [] })
    } finally {
      client.close()
      await host.stop()
    }
  })

  it('a discover through it that holds a connection to the agent gets both cards from its answer by key: neither agent is asked for its card', async () => {
    const asker = await askerThrough(holder, own.capability_id, nodes)
    // the holder's own card is its own word; the connection backs its word that the agent exists
    expect(await asker.join(agent.addresses)).toBe(1)
    const before = { ...asker.discovery.stats }
    const origins: CardOrigin[] = []
    const found = await asker.discover({ capability: own }, { limit: 2, explain: (o) => { origins.push(o) } })
    expect(found.map(c => c.agent_id).sort()).toEqual([holderCard.agent_id, agentCard.agent_id].sort())
    expect(origins.map(o => [o.source, o.named_by])).toEqual([['holder', holder.agentId], ['holder', holder.agentId]])
    expect(asker.discovery.stats.heldKeyAsks - before.heldKeyAsks).toBe(1)
    expect(asker.discovery.stats.fetchedCards - before.fetchedCards).toBe(0)
    expect(asker.discovery.stats.heldCardsUnbacked - before.heldCardsUnbacked).toBe(0)
  })

  it('a discover through it with nothing else naming the agent takes the holder\'s own card from its answer, and asks the agent for its own', async () => {
    const asker = await askerThrough(holder, own.capability_id, nodes)
    const before = { ...asker.discovery.stats }
    const origins: CardOrigin[] = []
    const found = await asker.discover({ capability: own }, { limit: 2, explain: (o) => { origins.push(o) } })
    expect(found.map(c => c.agent_id).sort()).toEqual([holderCard.agent_id, agentCard.agent_id].sort())
    // the holder could have signed the agent's card with a key of its own making: its word alone is not enough
    expect(origins.map(o => [o.agent_id, o.source])).toEqual([[holderCard.agent_id, 'holder'], [agentCard.agent_id, 'agent']])
    expect(asker.discovery.stats.heldCardsUnbacked - before.heldCardsUnbacked).toBe(1)
    expect(asker.discovery.stats.fetchedCards - before.fetchedCards).toBe(1)
  })
})
