/**
 * Cards held for others (src/card/held-cards.ts, protocols/card.md
 * `get_held_cards`): a node that keeps an agent's provider record pulls and
 * keeps its card, and a discover gets cards from the peer whose DHT answer
 * named the providers instead of dialing each provider, when a source other
 * than that peer backs the agent (another peer names it or sends its card
 * too): on one holder's word alone the agent is asked itself.
 */
import { createHash } from 'node:crypto'
import { afterAll, describe, expect, it, vi } from 'vitest'
import type { PeerId } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { CARD_HELD_ASK_MAX, CARD_HELD_MAX, CARD_HELD_PULL_MIN_INTERVAL_MS, CARD_HELD_PULL_QUEUE, CARD_HELD_PULL_RETRIES, CARD_HELD_PULL_RETRY_MS, CARD_MAX_FRAME_BYTES, CARD_PROTOCOL, CARD_REPUBLISH_INTERVAL_MS } from '../src/constants.ts'
import { capabilityKey, issueCard, type AgentCard } from '../src/card/card.ts'
import { newDiscoveryStats } from '../src/card/discovery-stats.ts'
import { CardFetches } from '../src/card/fetch-order.ts'
import type { CardOrigin } from '../src/card/discovery.ts'
import { askHolder, HeldCards } from '../src/card/held-cards.ts'
import { AgentNotFoundError, DelegationRefusedError, TimeoutError } from '../src/errors.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { componentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { kadRoutingTable } from '../src/wire/kad-internals.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { draft, expired, forged, newKey } from './card-fixtures.ts'
import { rejectsWith, startLoopbackHost, startMesh, stopAll, until } from './helpers.ts'

// the cases count where cards came from (holders, agents, the DHT): a holder's answer by key that a busy machine
// delayed past CARD_HELD_ASK_TIMEOUT_MS (500 ms) sent the discover to the agents instead. No case here is about
// that limit
vi.mock('../src/constants.ts', async (orig) => ({ ...(await orig<typeof import('../src/constants.ts')>()), CARD_HELD_ASK_TIMEOUT_MS: 10_000 }))

const log = componentLogger(undefined, 'test')
const cap = { capability_id: 'cap:held', version: '1.0.0' }

async function cardOf (seq = 1, issuedAt = Date.now()): Promise<AgentCard> {
  return issueCard(await newKey(), draft, seq, issuedAt)
}

describe('HeldCards', () => {
  const quiet = (): { held: HeldCards, pulls: PeerId[], stats: ReturnType<typeof newDiscoveryStats>, clock: { now: number }, connected: Set<string> } => {
    const pulls: PeerId[] = []
    const stats = newDiscoveryStats()
    const clock = { now: Date.now() }
    const connected = new Set<string>()
    // a pull that never ends: the test sees what was asked for, nothing more
    const held = new HeldCards({ pull: async (peer) => { pulls.push(peer); return new Promise<AgentCard>(() => {}) }, connected: p => connected.has(p.toString()), stats, log, now: () => clock.now })
    return { held, pulls, stats, clock, connected }
  }

  it('keeps the newest unexpired card of an agent and hands out only unexpired ones', async () => {
    const { held } = quiet()
    const key = await newKey()
    const id = agentIdOf(key)
    const newer = await issueCard(key, draft, 5)
    held.hold(newer)
    held.hold(await issueCard(key, draft, 4))
    expect(held.answer([id])).toEqual([newer])
    const old = await expired(await newKey())
    held.hold(old)
    expect(held.answer([old.agent_id, id, 'not-held'])).toEqual([newer])
  })

  it('puts the node\'s own card first when it is given, once, and never an expired one', async () => {
    const { held, stats } = quiet()
    const mine = await cardOf()
    const other = await cardOf()
    held.hold(other)
    const served = stats.heldCardsServed
    expect(held.answer([other.agent_id, mine.agent_id], mine)).toEqual([mine, other])
    expect(held.answer([mine.agent_id], mine)).toEqual([mine])
    expect(held.answer([other.agent_id], await expired(await newKey()))).toEqual([other])
    expect(held.answer([other.agent_id], mine, 1)).toEqual([mine])
    expect(stats.heldCardsServed - served).toBe(5)
  })

  it('answers no more than one frame holds and forgets the least recently stored past CARD_HELD_MAX', async () => {
    const { held } = quiet()
    const cards = await Promise.all(Array.from({ length: CARD_HELD_ASK_MAX }, async () => cardOf()))
    for (const c of cards) held.hold(c)
    const answer = held.answer(cards.map(c => c.agent_id))
    expect(answer.length).toBeGreaterThan(0)
    expect(Buffer.byteLength(JSON.stringify({ id: 1, ok: true, body: { cards: answer } }))).toBeLessThanOrEqual(CARD_MAX_FRAME_BYTES)
    expect(answer.length).toBeLessThanOrEqual(cards.length)
    const first = cards[0]!
    for (let i = 0; i < CARD_HELD_MAX; i++) held.hold({ ...first, agent_id: `filler-${i}` })
    expect(held.size).toBe(CARD_HELD_MAX)
    expect(held.answer([first.agent_id])).toEqual([])
  })

  it('pulls after a provider record only over a connection it holds, once per interval, and again when a card asked for is due', async () => {
    const { held, pulls, stats, clock, connected } = quiet()
    const card = await cardOf()
    const peer = peerIdFromString(card.agent_id)
    held.onProviderRecord(peer)
    expect(pulls).toEqual([]) // not connected: a record's pull never dials
    expect(stats.heldCardPullsSkipped).toBe(1) // and the pull not made is counted
    connected.add(card.agent_id)
    clock.now += CARD_HELD_PULL_MIN_INTERVAL_MS
    held.onProviderRecord(peer)
    expect(pulls.map(String)).toEqual([card.agent_id])
    held.hold(card)
    held.onProviderRecord(peer) // within the interval: nothing to pull
    expect(pulls.length).toBe(1)
    clock.now += CARD_HELD_PULL_MIN_INTERVAL_MS
    // a recent card held, but its agent's new provider record may come with a new card (one that dropped a
    // capability): pulled again (before, only once the held card was due)
    held.onProviderRecord(peer)
    expect(pulls.length).toBe(2)
    // a republish interval later the agent has likely re-signed: still handed out, and pulled again
    clock.now = Date.parse(card.issued_at) + CARD_REPUBLISH_INTERVAL_MS
    connected.clear()
    expect(held.answer([card.agent_id])).toEqual([card])
    expect(pulls.length).toBe(3)
    expect(stats.heldCardsServed).toBe(1)
    // an asker cannot make a holder pull (and so dial) an agent whose card it never held
    const stranger = await cardOf()
    expect(held.answer([stranger.agent_id])).toEqual([])
    expect(pulls.length).toBe(3)
  })

  it('drops pulls past CARD_HELD_PULL_QUEUE and counts them', async () => {
    const { held, stats, connected } = quiet()
    const peers = await Promise.all(Array.from({ length: CARD_HELD_PULL_QUEUE + 10 }, async () => peerIdFromString(agentIdOf(await newKey()))))
    for (const p of peers) connected.add(p.toString())
    for (const p of peers) held.onProviderRecord(p)
    // CARD_HELD_PULL_CONCURRENCY run (and never end), the queue fills, the rest are counted
    expect(stats.heldCardPullsDropped).toBeGreaterThan(0)
    expect(stats.heldCardPullsDropped).toBeLessThanOrEqual(10)
  })

  it('counts failed pulls, and of them those that ran out of time and those that lost their stream', async () => {
    const stats = newDiscoveryStats()
    // as the client reports them (wire/client.ts): its own time limits and lost streams are AGENT_NOT_FOUND with a reason
    const outcomes = [
      new TimeoutError('no answer in time'),
      new AgentNotFoundError('agent did not answer get_card within 2000 ms', { reason: 'timeout', timeout: 'call', limit_ms: 2000 }),
      new AgentNotFoundError('stream to agent closed before it answered', { reason: 'closed' }),
      new AgentNotFoundError('agent is unreachable', { reason: 'unreachable' }),
      new DelegationRefusedError('not now', { reason: 'policy' })
    ]
    const held = new HeldCards({ pull: async () => { throw outcomes.shift() }, connected: () => true, stats, log })
    for (let i = 0; i < 5; i++) held.onProviderRecord(peerIdFromString(agentIdOf(await newKey())))
    await until(() => stats.heldCardPullFailures === 5, 'every pull failed')
    expect(stats.heldCardPullTimeouts).toBe(2)
    expect(stats.heldCardPullsLost).toBe(2)
    expect(stats.heldCardPulls).toBe(0)
    // the four that ran out of time or lost their connection wait to be tried again; the refused one does not
    expect(stats.heldCardPullRetries).toBe(4)
    held.stop()
  })

  it('tries a pull that ran out of time again later, at most CARD_HELD_PULL_RETRIES times, and one asked for after that', async () => {
    const stats = newDiscoveryStats()
    const clock = { now: Date.now() }
    const waits: Array<{ fn: () => void, ms: number }> = []
    let failing = true
    const card = await cardOf()
    const peer = peerIdFromString(card.agent_id)
    const connected = new Set([card.agent_id])
    const held = new HeldCards({
      pull: async () => {
        if (failing) throw new AgentNotFoundError('agent did not answer get_card within 2000 ms', { reason: 'timeout' })
        return card
      },
      connected: p => connected.has(p.toString()),
      stats,
      log,
      now: () => clock.now,
      schedule: (fn, ms) => { waits.push({ fn, ms }); return () => {} }
    })
    const fire = async (): Promise<number> => {
      const w = waits.shift()
      if (w === undefined) throw new Error('no pull waits to be tried again')
      const failed = stats.heldCardPullFailures
      w.fn()
      await until(() => stats.heldCardPullFailures > failed || stats.heldCardPulls > 0, 'the pull tried again ended')
      return w.ms
    }
    held.onProviderRecord(peer)
    await until(() => stats.heldCardPullFailures === 1, 'the first pull failed')
    // each wait is half to all of CARD_HELD_PULL_RETRY_MS times the try, and does not wait for the pull interval
    for (let t = 1; t <= CARD_HELD_PULL_RETRIES; t++) {
      const ms = await fire()
      expect(ms).toBeGreaterThanOrEqual(CARD_HELD_PULL_RETRY_MS * t / 2)
      expect(ms).toBeLessThanOrEqual(CARD_HELD_PULL_RETRY_MS * t)
    }
    expect(stats.heldCardPullFailures).toBe(1 + CARD_HELD_PULL_RETRIES)
    expect(waits).toEqual([]) // no more tries of its own
    expect(stats.heldCardPullRetries).toBe(CARD_HELD_PULL_RETRIES)
    // a discover asks this node for the card: not held, its record is, so it is pulled again (once the interval is over)
    failing = false
    expect(held.answer([card.agent_id])).toEqual([])
    expect(stats.heldCardPullFailures).toBe(1 + CARD_HELD_PULL_RETRIES) // not within the interval
    clock.now += CARD_HELD_PULL_MIN_INTERVAL_MS
    expect(held.answer([card.agent_id])).toEqual([])
    await until(() => stats.heldCardPulls === 1, 'the card asked for was pulled')
    expect(held.answer([card.agent_id])).toEqual([card])
    held.stop()
  })

  it('a pull to be tried again whose connection closed meanwhile is not made, and does not hold its place', async () => {
    const stats = newDiscoveryStats()
    const clock = { now: Date.now() }
    const waits: Array<() => void> = []
    const peer = peerIdFromString(agentIdOf(await newKey()))
    const connected = new Set([peer.toString()])
    let pulls = 0
    const held = new HeldCards({
      pull: async () => { pulls++; throw new AgentNotFoundError('stream to agent closed before it answered', { reason: 'closed' }) },
      connected: p => connected.has(p.toString()),
      stats,
      log,
      now: () => clock.now,
      schedule: (fn) => { waits.push(fn); return () => {} }
    })
    held.onProviderRecord(peer)
    await until(() => stats.heldCardPullFailures === 1, 'the pull failed')
    connected.clear()
    waits.shift()?.()
    expect(stats.heldCardPullsSkipped).toBe(1) // a pull never dials
    expect(pulls).toBe(1)
    // nothing waits for it any more: a discover asking for the card makes it pull again, once connected
    connected.add(peer.toString())
    clock.now += CARD_HELD_PULL_MIN_INTERVAL_MS
    held.answer([peer.toString()])
    await until(() => stats.heldCardPullFailures === 2, 'the card asked for was pulled again')
    expect(pulls).toBe(2)
    held.stop()
  })
})

describe('CardFetches with a holder', () => {
  type Init = ConstructorParameters<typeof CardFetches<AgentCard>>[0]
  /** A discover's fetches with what these tests do not vary: every card matches, none is cached. */
  const fetchesOf = async (init: Pick<Init, 'wanted' | 'connected' | 'fetch' | 'ask' | 'stats' | 'onChange'>): Promise<CardFetches<AgentCard>> => new CardFetches<AgentCard>({
    self: peerIdFromString(agentIdOf(await newKey())),
    matches: () => true,
    signal: AbortSignal.timeout(10_000),
    stopped: new AbortController().signal,
    known: () => false,
    remember: c => c,
    log,
    ...init
  })

  /**
   * Three unconnected providers named by `holder`'s answer; `sends` picks what the holder sends of what it is
   * asked for. `alsoNamed`: another peer's answer names the three too, once the holder's cards are in.
   */
  const run = async (sends: (cards: AgentCard[]) => AgentCard[], alsoNamed = false): Promise<{ ready: AgentCard[], fetched: string[], asked: number, stats: ReturnType<typeof newDiscoveryStats> }> => {
    const cards = await Promise.all([1, 2, 3].map(async () => cardOf()))
    const byId = new Map(cards.map(c => [c.agent_id, c]))
    const holder = peerIdFromString(agentIdOf(await newKey()))
    const fetched: string[] = []
    let asked = 0
    const stats = newDiscoveryStats()
    const ended = Promise.withResolvers<void>()
    const fetches: CardFetches<AgentCard> = await fetchesOf({
      wanted: () => 10,
      connected: p => p.equals(holder),
      fetch: async (p) => { fetched.push(p.toString()); return byId.get(p.toString())! },
      ask: async (_holder, agents, _signal, onCard) => {
        asked += agents.length
        const sent = sends(agents.map(a => byId.get(a.toString())!))
        for (const c of sent) onCard(c)
        return sent
      },
      stats,
      onChange: () => { if (fetches.idle) ended.resolve() }
    })
    const other = peerIdFromString(agentIdOf(await newKey()))
    fetches.add(cards.map(c => peerIdFromString(c.agent_id)), holder)
    if (alsoNamed) fetches.add(cards.map(c => peerIdFromString(c.agent_id)), other)
    await ended.promise
    return { ready: fetches.ready, fetched, asked, stats }
  }

  it('takes what the holder sends of agents another peer names too, and fetches only the rest from the agents', async () => {
    const r = await run(cards => cards.slice(0, 2), true)
    expect(r.asked).toBe(3)
    expect(r.fetched.length).toBe(1)
    expect(r.ready.length).toBe(3)
    expect(r.stats.heldCardsReceived).toBe(2)
    // the two came before the other peer's answer named their agents: held back until it did
    expect(r.stats.heldCardsUnbacked).toBe(2)
  })

  it('takes nothing on the holder\'s word alone: with no other peer naming the agents, each is asked for its card', async () => {
    const r = await run(cards => cards.slice(0, 2))
    expect(r.asked).toBe(3)
    expect(r.fetched.length).toBe(3)
    expect(r.ready.length).toBe(3)
    expect(r.stats.heldCardsReceived).toBe(2)
    expect(r.stats.heldCardsUnbacked).toBe(2)
  })

  it('asks the holder for twice the cards still wanted and one more, dials nobody meanwhile, and still fetches from connected agents', async () => {
    const cards = await Promise.all(Array.from({ length: 12 }, async () => cardOf()))
    const holder = peerIdFromString(agentIdOf(await newKey()))
    const fetched: string[] = []
    let asked: string[] = []
    let fetchedWhileAsking = -1
    const answer = Promise.withResolvers<void>()
    const stats = newDiscoveryStats()
    const fetches = await fetchesOf({
      wanted: () => 4,
      // the last provider is connected: fetching its card costs no dial
      connected: p => p.equals(holder) || p.toString() === cards[11]!.agent_id,
      fetch: async (p) => { fetched.push(p.toString()); return cards.find(c => c.agent_id === p.toString())! },
      ask: async (_h, agents, _s, onCard) => {
        asked = agents.map(String)
        await answer.promise
        fetchedWhileAsking = fetched.length
        const sent = cards.filter(c => asked.includes(c.agent_id)).slice(0, 1)
        for (const c of sent) onCard(c)
        return sent
      },
      stats,
      onChange: () => {}
    })
    fetches.add(cards.map(c => peerIdFromString(c.agent_id)), holder)
    // 2 x 4 + 1: more than the fetches a discover runs at once (DISCOVER_FETCH_CONCURRENCY)
    expect(asked.length).toBe(9)
    expect(asked).not.toContain(cards[11]!.agent_id)
    answer.resolve()
    await until(() => fetchedWhileAsking >= 0, 'the holder\'s answer to be used')
    expect(fetched.slice(0, fetchedWhileAsking)).toEqual([cards[11]!.agent_id])
    // one card came from the holder: the agents are asked for what is still wanted, and a spare
    expect(fetches.ready.length).toBeGreaterThanOrEqual(1)
    expect(stats.heldCardsReceived).toBe(1)
  })

  it('fetches every provider from its agent when the holder sends nothing or fails', async () => {
    const none = await run(() => [])
    expect(none.fetched.length).toBe(3)
    expect(none.ready.length).toBe(3)
    const failed = await run(() => { throw new Error('holder gone') })
    expect(failed.fetched.length).toBe(3)
    expect(failed.ready.length).toBe(3)
    expect(failed.stats.heldCardAskFailures).toBe(1)
  })

  it('askHolder rejects a card nobody asked for, and a second card of one agent', async () => {
    const asked = await cardOf()
    const extra = await cardOf()
    const client = { call: async () => ({ cards: [asked, extra, asked] }) } as unknown as RpcClient
    const reasons: string[] = []
    const got = await askHolder(client, peerIdFromString(agentIdOf(await newKey())), { agents: [peerIdFromString(asked.agent_id)] }, AbortSignal.timeout(5_000), err => { reasons.push(String(err.details?.reason)) })
    expect(got).toEqual([asked])
    expect(reasons).toEqual(['not_asked', 'not_asked'])
  })
})

describe('held cards between real nodes', () => {
  const nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  /** `holders` and three agents that joined through each of them, announced, had their cards pulled by every holder, and are gone. */
  const goneAgentsHeldBy = async (holderCount: number): Promise<{ holders: MeshNode[], cards: AgentCard[] }> => {
    const started = await Promise.all(Array.from({ length: holderCount + 3 }, async () => (await startMesh(1))[0]!))
    nodes.push(...started)
    const holders = started.slice(0, holderCount)
    const agents = started.slice(holderCount)
    // each agent holds a connection to every holder: its provider record reaches each, and each pulls the card over it
    for (const a of agents) for (const h of holders) expect(await a.join(h.addresses)).toBe(1)
    const cards = await Promise.all(agents.map(async (a, i) => a.publishCard({ ...draft, name: `agent-${i}`, capabilities: [cap] })))
    await Promise.all(agents.map(async a => a.discovery.announce()))
    for (const h of holders) await until(() => h.discovery.stats.heldCardPulls >= agents.length, 'every holder to pull the three cards')
    await Promise.all(agents.map(async a => a.stop()))
    return { holders, cards }
  }

  /** A new node that joined through every holder, and what its discover of `cap` found, and how. */
  const discoverThrough = async (holders: MeshNode[], limit: number): Promise<{ asker: MeshNode, found: AgentCard[], origins: CardOrigin[] }> => {
    const [asker] = await startMesh(1)
    nodes.push(asker!)
    for (const h of holders) expect(await asker!.join(h.addresses)).toBe(1)
    // every holder is a contact the lookup may ask (by key too): in the asker's routing table
    const table = kadRoutingTable(asker!.host.services.dht)!
    const kadId = createHash('sha256').update((await capabilityKey(cap.capability_id)).multihash.bytes).digest()
    await until(() => holders.every(h => table.closestPeers(kadId, { count: 20 }).some(p => p.equals(h.host.peerId))), 'the holders in the asker\'s routing table')
    const origins: CardOrigin[] = []
    const found = await asker!.discover({ capability: cap }, { limit, explain: (o) => { origins.push(o) } })
    return { asker: asker!, found, origins }
  }

  it('a discover gets the cards of gone agents from the holders when two of them hold them', async () => {
    const { holders, cards } = await goneAgentsHeldBy(2)
    const { asker, found, origins } = await discoverThrough(holders, cards.length)
    expect(found.map(c => c.agent_id).sort()).toEqual(cards.map(c => c.agent_id).sort())
    // each holder backs the other's word (the second's answer by key sends the same cards, or its DHT answer names
    // the agents): every card is a holder's, none had to be fetched or read from the DHT
    expect(origins.map(o => [o.agent_id, o.source]).sort()).toEqual(cards.map(c => [c.agent_id, 'holder']).sort())
    for (const o of origins) expect(holders.map(h => h.agentId)).toContain(o.named_by)
    expect(asker.discovery.stats.heldCardsReceived).toBeGreaterThanOrEqual(cards.length)
    expect(asker.discovery.stats.fetchedCards).toBe(0)
    expect(asker.discovery.stats.dhtFallbacks).toBe(0)
  })

  it('a discover met again: the holders\' cards it verified before are not checked with Ed25519 again (the node\'s own cache)', async () => {
    const { holders, cards } = await goneAgentsHeldBy(2)
    const { asker, found } = await discoverThrough(holders, cards.length)
    expect(found).toHaveLength(cards.length)
    const checked = asker.signatures.stats.checked
    const hits = asker.signatures.stats.hits
    // a holder's card is never kept in the card cache: the next discover gets every card from the holders again
    const again = await asker.discover({ capability: cap }, { limit: cards.length })
    expect(again.map(c => c.agent_id).sort()).toEqual(cards.map(c => c.agent_id).sort())
    expect(asker.signatures.stats.checked).toBe(checked)
    expect(asker.signatures.stats.hits).toBeGreaterThanOrEqual(hits + cards.length)
  })

  it('a discover does not take the cards of gone agents on one holder\'s word: it asks the agents, and falls back to their DHT records', async () => {
    // a holder could name agents nobody runs and sign their cards with fresh keys (protocols/card.md get_held_cards)
    const { holders, cards } = await goneAgentsHeldBy(1)
    const { asker, found, origins } = await discoverThrough(holders, cards.length)
    // the cards are still found: each agent put its own card record in the DHT before it left
    expect(found.map(c => c.agent_id).sort()).toEqual(cards.map(c => c.agent_id).sort())
    expect(origins.map(o => [o.agent_id, o.source]).sort()).toEqual(cards.map(c => [c.agent_id, 'dht']).sort())
    expect(asker.discovery.stats.heldCardsReceived).toBeGreaterThanOrEqual(cards.length)
    expect(asker.discovery.stats.heldCardsUnbacked).toBe(cards.length)
    expect(asker.discovery.stats.dhtFallbacks).toBe(cards.length)
    expect(holders[0]!.discovery.stats.heldCardsServed).toBeGreaterThanOrEqual(cards.length)
  })

  it('the asker verifies every held card: forged ones and ones not asked for are rejected, not returned', async () => {
    const [holder] = await startMesh(1, { transport: 'tcp' })
    nodes.push(holder!)
    const asked = await newKey()
    const other = await cardOf()
    const genuine = await issueCard(asked, draft, 1)
    // the holder trusts what it keeps (it verified it when it pulled it): put bad cards there directly
    const held = (holder!.discovery as unknown as { held: HeldCards }).held
    held.hold(await forged(asked, await newKey(), 2))
    held.hold(other)
    const host = await startLoopbackHost()
    const client = new RpcClient(host, { protocol: CARD_PROTOCOL, maxFrameBytes: CARD_MAX_FRAME_BYTES })
    try {
      await host.peerStore.merge(holder!.host.peerId, { multiaddrs: holder!.host.getMultiaddrs() })
      const rejected: string[] = []
      const got = await askHolder(client, holder!.host.peerId, { agents: [peerIdFromString(genuine.agent_id)] }, AbortSignal.timeout(5_000), err => { rejected.push(String(err.details?.reason)) })
      expect(got).toEqual([])
      expect(rejected).toEqual(['bad_signature'])
      // an older genuine card does not replace the newer forged one the holder keeps...
      held.hold(genuine)
      expect(await askHolder(client, holder!.host.peerId, { agents: [peerIdFromString(genuine.agent_id)] }, AbortSignal.timeout(5_000), () => {})).toEqual([])
      // ...a newer one does
      const newer = await issueCard(asked, draft, 3)
      held.hold(newer)
      expect(await askHolder(client, holder!.host.peerId, { agents: [peerIdFromString(genuine.agent_id)] }, AbortSignal.timeout(5_000), () => {})).toEqual([newer])

      // bad asks get INVALID_REQUEST frames
      const ids = await Promise.all(Array.from({ length: CARD_HELD_ASK_MAX + 1 }, async () => agentIdOf(await newKey())))
      await rejectsWith(client.call(holder!.host.peerId, 'get_held_cards', { agents: ids }), 'INVALID_REQUEST')
      await rejectsWith(client.call(holder!.host.peerId, 'get_held_cards', { agents: [] }), 'INVALID_REQUEST')
      await rejectsWith(client.call(holder!.host.peerId, 'get_held_cards', { agents: ['not an agent id'] }), 'INVALID_REQUEST')
      await rejectsWith(client.call(holder!.host.peerId, 'get_held_cards', {}), 'INVALID_REQUEST')
      expect(await client.call(holder!.host.peerId, 'get_held_cards', { agents: [other.agent_id] })).toEqual({ cards: [other] })
    } finally {
      client.close()
      await host.stop()
    }
  })
})
