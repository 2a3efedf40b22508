/**
 * A holder's card counts as its agent's answer only when a source other than
 * that holder backs the agent (fetch-order.ts fromHolder). Anyone can sign a
 * valid card with a fresh key pair: a node closest to a capability's key
 * could name agents nobody runs in its GET_PROVIDERS answers and send their
 * cards on get_held_cards, and a discover with a small limit returned them
 * instead of the agents that exist.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PeerId, PrivateKey } from '@libp2p/interface'
import { peerIdFromPrivateKey, peerIdFromString } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityKey, issueCard, type AgentCard } from '../src/card/card.ts'
import { newDiscoveryStats, type DiscoveryStats } from '../src/card/discovery-stats.ts'
import { CardFetches, type CardFetchesInit } from '../src/card/fetch-order.ts'
import { CARD_MAX_FRAME_BYTES, CARD_PROTOCOL } from '../src/constants.ts'
import { agentIdOf, peerIdOfAgent } from '../src/identity/identity.ts'
import { componentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { serve } from '../src/wire/rpc.ts'
import { draft, newKey } from './card-fixtures.ts'
import { startMesh, stopAll } from './helpers.ts'
import { distanceTo } from './fixtures/dht-records.ts'

const log = componentLogger(undefined, 'test')

async function peer (): Promise<PeerId> { return peerIdFromString(agentIdOf(await newKey())) }
async function cardOf (): Promise<AgentCard> { return issueCard(await newKey(), draft, 1) }

/** A discover's CardFetches (every card matches, none is cached, nobody connected but `holders`); `ended` once nothing waits or is in flight. */
async function cardFetches (init: Pick<CardFetchesInit<AgentCard>, 'fetch'> & Partial<CardFetchesInit<AgentCard>>, holders: PeerId[]): Promise<{ fetches: CardFetches<AgentCard>, stats: DiscoveryStats, ended: Promise<void> }> {
  const stats = newDiscoveryStats()
  const ended = Promise.withResolvers<void>()
  const fetches: CardFetches<AgentCard> = new CardFetches<AgentCard>({
    self: await peer(),
    wanted: () => 10,
    matches: () => true,
    signal: AbortSignal.timeout(10_000),
    stopped: new AbortController().signal,
    connected: p => holders.some(h => h.equals(p)),
    known: () => false,
    remember: c => c,
    log,
    stats,
    onChange: () => { if (fetches.idle) ended.resolve() },
    ...init
  })
  return { fetches, stats, ended: ended.promise }
}

describe('CardFetches: whose word a holder\'s card needs', () => {
  it('a card only the holder that named its agent sent is not a result: the agent is asked, and an agent that does not answer is spent', async () => {
    const cards = await Promise.all([1, 2].map(async () => cardOf()))
    const holder = await peer()
    const fetched: string[] = []
    const { fetches, stats, ended } = await cardFetches({
      // the first agent answers, the second does not exist
      fetch: async (p) => {
        fetched.push(p.toString())
        if (p.toString() === cards[0]!.agent_id) return cards[0]!
        throw new Error('no such agent')
      },
      ask: async (_h, agents, _s, onCard) => {
        const sent = cards.filter(c => agents.some(a => a.toString() === c.agent_id))
        for (const c of sent) onCard(c)
        return sent
      }
    }, [holder])
    fetches.add(cards.map(c => peerIdFromString(c.agent_id)), holder)
    await ended
    expect(fetches.ready.map(c => c.agent_id)).toEqual([cards[0]!.agent_id])
    expect(fetched.sort()).toEqual(cards.map(c => c.agent_id).sort())
    expect(fetches.spent).toBe(1)
    expect(stats.heldCardsReceived).toBe(2)
    expect(stats.heldCardsUnbacked).toBe(2)
  })

  it('the same by key: the contact\'s cards of agents only it names are left to the agents', async () => {
    const card = await cardOf()
    const contact = await peer()
    const fetched: string[] = []
    const { fetches, ended } = await cardFetches({
      fetch: async (p) => { fetched.push(p.toString()); throw new Error('no such agent') },
      ask: async () => { throw new Error('not asked again by agent: it sent that card by key') },
      askKey: async (_h, _s, onCard) => { onCard(card); return [card] }
    }, [contact])
    fetches.askKey(contact)
    fetches.add([peerIdFromString(card.agent_id)], contact)
    await ended
    expect(fetches.ready).toEqual([])
    expect(fetched).toEqual([card.agent_id])
  })

  it('a card another peer\'s answer, another holder or this node\'s own records back is a result, with no fetch', async () => {
    const [a, b, c] = await Promise.all([1, 2, 3].map(async () => cardOf())) as [AgentCard, AgentCard, AgentCard]
    const [first, second] = await Promise.all([peer(), peer()]) as [PeerId, PeerId]
    const fetched: string[] = []
    const { fetches, stats, ended } = await cardFetches({
      fetch: async (p) => { fetched.push(p.toString()); throw new Error('no fetch expected') },
      // the first contact holds all three; the second holds `b` too
      askKey: async (h, _s, onCard) => {
        const sent = h.equals(first) ? [a, b, c] : [b]
        for (const card of sent) onCard(card)
        return sent
      }
    }, [first, second])
    fetches.askKey(first)
    // nobody else named them yet: none is a result
    expect(fetches.ready).toEqual([])
    // `a` named by the second contact's DHT answer, `c` by this node's own records, `b` sent by the second contact too
    fetches.add([peerIdFromString(a.agent_id)], second)
    fetches.add([peerIdFromString(c.agent_id)])
    fetches.askKey(second)
    await ended
    expect(fetches.ready.map(x => x.agent_id)).toEqual([a, c, b].map(x => x.agent_id))
    expect(fetched).toEqual([])
    expect(stats.heldCardsUnbacked).toBe(3)
  })
})

const K = 3
const NODES = 6
const cap = { capability_id: 'cap:holder-backing', version: '1.0.0' }

interface ProviderStore { addProvider: (key: unknown, peer: PeerId) => Promise<void> }
const storeOf = (n: MeshNode): ProviderStore => (n.host.services.dht as unknown as { providers: ProviderStore }).providers
const peerOf = (n: MeshNode): PeerId => peerIdOfAgent(n.agentId)

describe('a holder that names agents nobody runs and sends their cards', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => {
    nodes = await startMesh(NODES, { transport: 'tcp', nodeOptions: () => ({ dht: { k: K, alpha: K, disjointPaths: 1 } }) })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('a discover returns none of them, by key or by agent, and caches none', async () => {
    const key = await capabilityKey(cap.capability_id)
    // the hostile node is the one closest to the key (kad-dht's ids: SHA-256 of the bytes): the asker's lookup asks it first
    const to = distanceTo(key)
    const distance = (n: MeshNode): Buffer => to(peerOf(n))
    const asker = nodes[NODES - 1]!
    const [hostile, honest] = nodes.slice(0, NODES - 1).sort((a, b) => Buffer.compare(distance(a), distance(b))) as [MeshNode, MeshNode]
    await honest.runs.handle(cap, async () => ({ ok: true }))
    await honest.publishCard({ name: 'honest', capabilities: [cap] })
    expect(await honest.discovery.announce()).toBeGreaterThan(0)

    // 20 agents nobody runs: a key pair and a signed card each, a provider record at the hostile node
    const ghosts = new Map<string, AgentCard>()
    for (let i = 0; i < 20; i++) {
      const k: PrivateKey = await generateKeyPair('Ed25519')
      const card = await issueCard(k, { name: `ghost-${i}`, capabilities: [cap] }, Date.now())
      ghosts.set(card.agent_id, card)
      const id = peerIdFromPrivateKey(k)
      await storeOf(hostile).addProvider(key, id)
      await hostile.host.peerStore.merge(id, { multiaddrs: [multiaddr('/ip4/127.0.0.1/tcp/1')] })
    }
    await hostile.host.unhandle(CARD_PROTOCOL)
    await serve(hostile.host, {
      protocol: CARD_PROTOCOL,
      maxFrameBytes: CARD_MAX_FRAME_BYTES,
      methods: {
        get_card: { handle: async () => ({ card: hostile.card }) },
        get_held_cards: {
          handle: async (body) => {
            const b = body as { agents?: string[], key?: string }
            const cards = b.agents !== undefined ? b.agents.flatMap(a => ghosts.get(a) ?? []) : [...ghosts.values()]
            return { cards: cards.slice(0, 8) }
          }
        }
      }
    })

    for (let i = 0; i < 4; i++) {
      // the asker holds a connection it opened to the hostile node only, as after a walk that asked it
      for (const c of asker.host.getConnections()) if (!c.remotePeer.equals(peerOf(hostile))) await c.close()
      // a dial or a discover cut short by a busy machine would say nothing of the rule: each has more time than its default
      if (asker.host.getConnections(peerOf(hostile)).length === 0) await asker.host.dial(peerOf(hostile), { signal: AbortSignal.timeout(20_000) })
      // even runs: asked by key too (the default); odd runs: the lookup's answers only (asked by agent)
      const found = await asker.discover({ capability: cap }, { limit: 1, cache: false, byKey: i % 2 === 0, timeoutMs: 20_000 })
      expect(found.filter(c => ghosts.has(c.agent_id)), `discover ${i}`).toEqual([])
      // the one agent that exists is the answer: the ghosts cost the discover dials, never its result
      expect(found.map(c => c.agent_id), `discover ${i}`).toEqual([honest.agentId])
    }
    // the ghosts' cards came, and were held back
    expect(asker.discovery.stats.heldCardsUnbacked).toBeGreaterThan(0)
    for (const id of ghosts.keys()) expect(asker.discovery.knownCard(id)).toBeUndefined()
  }, 120_000)
})
