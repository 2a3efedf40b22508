/**
 * The order in which a discover fetches providers' cards (src/card/fetch-order.ts):
 * connected providers first, and a provider that needs a dial only while the
 * fetches in flight are no more than the cards still wanted; only a connection
 * this node opened puts a provider first.
 */
import type { PeerId } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import { describe, expect, it } from 'vitest'
import { issueCard, type AgentCard } from '../src/card/card.ts'
import { newDiscoveryStats } from '../src/card/discovery-stats.ts'
import { CardFetches, nextProvider } from '../src/card/fetch-order.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { componentLogger } from '../src/logger.ts'
import { draft, newKey } from './card-fixtures.ts'

describe('which provider a discover asks for its card next', () => {
  const connected = new Set(['c1', 'c2'])
  const isConnected = (p: string): boolean => connected.has(p)

  it('takes a provider it holds a connection to before any that needs a dial, wherever it stands', () => {
    expect(nextProvider(['d1', 'd2', 'c1'], isConnected, 0, 4)).toBe(2)
    // a connected fetch costs no dial, but is a fetch: past the one spare it waits like a dial (before: it was
    // asked however many were in flight, so a peer naming its Sybils took every fetch; card-fetch-preferred-fair)
    expect(nextProvider(['d1', 'c2'], isConnected, 7, 1)).toBe(-1)
  })

  it('dials in arrival order while the fetches in flight are no more than the cards still wanted', () => {
    expect(nextProvider(['d1', 'd2'], isConnected, 0, 4)).toBe(0)
    expect(nextProvider(['d1', 'd2'], isConnected, 4, 4)).toBe(0)
    // one spare fetch, then it waits for one in flight to end
    expect(nextProvider(['d1', 'd2'], isConnected, 5, 4)).toBe(-1)
    expect(nextProvider(['d1'], isConnected, 1, 0)).toBe(-1)
  })

  it('has nothing to fetch when nothing is pending', () => {
    expect(nextProvider([], isConnected, 0, 4)).toBe(-1)
  })

  it('in a drain loop, fetches every connected provider and dials only what is wanted, plus one', () => {
    const pending = ['d1', 'c1', 'd2', 'd3', 'c2', 'd4']
    const fetched: string[] = []
    const wanted = 2
    for (let i = nextProvider(pending, isConnected, fetched.length, wanted); i >= 0; i = nextProvider(pending, isConnected, fetched.length, wanted)) {
      fetched.push(...pending.splice(i, 1))
    }
    expect(fetched).toEqual(['c1', 'c2', 'd1'])
    expect(pending).toEqual(['d2', 'd3', 'd4'])
  })
})

describe('providers connected by their own choice (CardFetches `preferred`)', () => {
  it('asks first only the providers on connections this node opened; the others in the order named, within the dial rule', async () => {
    const cards = await Promise.all([1, 2, 3, 4].map(async () => issueCard(await newKey(), draft, 1)))
    // in the order the lookup named them: two that connected to this node, one it connected to, one it is not connected to
    const [inA, inB, own, far] = cards.map(c => c.agent_id) as [string, string, string, string]
    const fetched: string[] = []
    const fetches = new CardFetches<AgentCard>({
      self: peerIdFromString(agentIdOf(await newKey())),
      wanted: () => 1,
      matches: () => true,
      signal: AbortSignal.timeout(60_000),
      stopped: new AbortController().signal,
      connected: p => p.toString() !== far,
      preferred: p => p.toString() === own,
      known: () => false,
      // nothing answers within the test: what it shows is the order of asking
      fetch: async (p, signal) => {
        fetched.push(p.toString())
        return new Promise<AgentCard>((_resolve, reject) => { signal.addEventListener('abort', () => { reject(signal.reason) }) })
      },
      remember: c => c,
      stats: newDiscoveryStats(),
      log: componentLogger(undefined, 'test'),
      onChange: () => {}
    })
    fetches.add(cards.map(c => peerIdFromString(c.agent_id)))
    // the one it connected to, then one card wanted plus one spare, in the order named
    expect(fetched).toEqual([own, inA])
    expect(fetched).not.toContain(inB)
    expect(fetched).not.toContain(far)
  })
})

describe('providers a discover spent (CardFetches `spent`, the lookup\'s ProviderDemand)', () => {
  it('counts a provider whose card could not be had or did not match, and not one whose card matched', async () => {
    const cards = await Promise.all([1, 2, 3].map(async () => issueCard(await newKey(), draft, 1)))
    const [good, gone, other] = cards.map(c => c.agent_id) as [string, string, string]
    let changes = 0
    const fetches = new CardFetches<AgentCard>({
      self: peerIdFromString(agentIdOf(await newKey())),
      wanted: () => 3,
      matches: c => c.agent_id !== other,
      signal: AbortSignal.timeout(60_000),
      stopped: new AbortController().signal,
      connected: () => true,
      known: () => false,
      fetch: async (p) => {
        if (p.toString() === gone) throw new Error('unreachable')
        return cards.find(c => c.agent_id === p.toString())!
      },
      remember: c => c,
      stats: newDiscoveryStats(),
      log: componentLogger(undefined, 'test'),
      onChange: () => { changes++ }
    })
    fetches.add([good, gone, other].map(id => peerIdFromString(id)))
    expect(fetches.spent).toBe(0)
    await new Promise<void>(resolve => { const poll = (): void => { if (fetches.idle) resolve(); else setImmediate(poll) }; poll() })
    expect(fetches.ready.map(c => c.agent_id)).toEqual([good])
    expect(fetches.spent).toBe(2)
    // each fetch that ended told the discover (and through it a waiting lookup)
    expect(changes).toBeGreaterThanOrEqual(3)
  })
})

describe('fetches written off once the lookup has waited them out (CardFetches.writeOff)', () => {
  it('no longer hold back a dial to a provider named after: it is asked at once, and a late card of theirs still counts', async () => {
    const cards = await Promise.all([1, 2, 3, 4, 5].map(async () => issueCard(await newKey(), draft, 1)))
    const [slowA, slowB, early, late, spare] = cards.map(c => c.agent_id) as [string, string, string, string, string]
    const fetched: string[] = []
    /** Fetches under way, by agent: each answers when the test says. */
    const answer = new Map<string, () => void>()
    const fetches: CardFetches<AgentCard> = new CardFetches<AgentCard>({
      self: peerIdFromString(agentIdOf(await newKey())),
      // one card still wanted whatever is ready (a caller that has not taken the ready ones yet)
      wanted: (): number => 1 + fetches.ready.length,
      matches: () => true,
      signal: AbortSignal.timeout(60_000),
      stopped: new AbortController().signal,
      connected: () => false,
      known: () => false,
      fetch: async (p) => {
        fetched.push(p.toString())
        return new Promise<AgentCard>((resolve) => { answer.set(p.toString(), () => { resolve(cards.find(c => c.agent_id === p.toString())!) }) })
      },
      remember: c => c,
      stats: newDiscoveryStats(),
      log: componentLogger(undefined, 'test'),
      onChange: () => {}
    })
    const settled = async (): Promise<void> => { for (let i = 0; i < 5; i++) await new Promise(resolve => setImmediate(resolve)) }
    fetches.add([slowA, slowB].map(id => peerIdFromString(id)))
    // one card wanted plus one spare: both dialed; one named now waits behind them
    fetches.add([peerIdFromString(early)])
    expect(fetched).toEqual([slowA, slowB])
    // the lookup waited them out and names two more: those are asked at once (one wanted, one spare, as at the
    // start), while the one named before still waits its turn as it did
    fetches.writeOff()
    fetches.add([late, spare].map(id => peerIdFromString(id)))
    expect(fetched).toEqual([slowA, slowB, late, spare])
    // a written-off fetch that answers after all is a result like any other, and frees no slot
    answer.get(slowA)?.()
    await settled()
    fetches.drain()
    expect(fetches.ready.map(c => c.agent_id)).toEqual([slowA])
    expect(fetched).toEqual([slowA, slowB, late, spare])
    // the new fetches count against dials as ever: once they end, the early one's turn comes
    answer.get(late)?.()
    answer.get(spare)?.()
    await settled()
    fetches.drain()
    expect(fetches.ready.map(c => c.agent_id)).toEqual([slowA, late, spare])
    expect(fetched).toEqual([slowA, slowB, late, spare, early])
  })
})

describe('providers named by many peers (provider-queue.ts): in turn over the naming peers', () => {
  it('one peer naming many providers that do not exist does not hold the fetches ahead of a provider another peer named', async () => {
    const honest = await issueCard(await newKey(), draft, 1)
    const fakes = await Promise.all(Array.from({ length: 50 }, async () => peerIdFromString(agentIdOf(await newKey()))))
    const [liar, friend] = await Promise.all([1, 2].map(async () => peerIdFromString(agentIdOf(await newKey())))) as [PeerId, PeerId]
    const fetched: string[] = []
    /** The dials to fake providers under way: each fails when the test says. */
    const dials: Array<() => void> = []
    const stats = newDiscoveryStats()
    const fetches = new CardFetches<AgentCard>({
      self: peerIdFromString(agentIdOf(await newKey())),
      wanted: () => 1,
      matches: () => true,
      signal: AbortSignal.timeout(60_000),
      stopped: new AbortController().signal,
      connected: () => false,
      known: () => false,
      fetch: async (p) => {
        fetched.push(p.toString())
        if (p.toString() === honest.agent_id) return honest
        return new Promise<AgentCard>((_resolve, reject) => { dials.push(() => { reject(new Error('no such peer')) }) })
      },
      remember: c => c,
      stats,
      log: componentLogger(undefined, 'test'),
      onChange: () => {}
    })
    const settled = async (): Promise<void> => { for (let i = 0; i < 5; i++) await new Promise(resolve => setImmediate(resolve)) }
    // the liar's answer comes first, with 50 providers (the lookup bounds how many one peer names: dht-providers.ts)
    fetches.add(fakes, liar)
    // one card wanted plus one spare: two of the liar's are dialed, then the fetches wait
    expect(fetched).toEqual([fakes[0]!.toString(), fakes[1]!.toString()])
    // the friend's answer names the honest agent
    fetches.add([peerIdFromString(honest.agent_id)], friend)
    expect(fetched).toHaveLength(2)
    // one of the liar's dials fails: the next turn is the friend's, not the liar's third
    dials.shift()?.()
    await settled()
    fetches.drain()
    expect(fetched).toEqual([fakes[0]!.toString(), fakes[1]!.toString(), honest.agent_id])
    await settled()
    expect(fetches.ready.map(c => c.agent_id)).toEqual([honest.agent_id])
    for (const fail of dials.splice(0)) fail()
    await settled()
  })
})

describe('a card a holder sends that does not match (CardFetches, a holder asked for providers it named)', () => {
  it('is not the agent\'s last word: the agent is asked itself, and the holder\'s card is not cached', async () => {
    const key = await newKey()
    const wanted = { capability_id: 'cap:new', version: '1.0.0' }
    // the holder hands out the agent's older card, still valid, from before it offered cap:new
    const older = await issueCard(key, draft, 1)
    const own = await issueCard(key, { ...draft, capabilities: [...(draft.capabilities ?? []), wanted] }, 2)
    const holder = peerIdFromString(agentIdOf(await newKey()))
    const cached: AgentCard[] = []
    const fetched: string[] = []
    const fetches = new CardFetches<AgentCard>({
      self: peerIdFromString(agentIdOf(await newKey())),
      wanted: () => 1,
      matches: c => c.capabilities.some(x => x.capability_id === wanted.capability_id),
      signal: AbortSignal.timeout(60_000),
      stopped: new AbortController().signal,
      connected: p => p.equals(holder),
      known: () => false,
      ask: async (_holder, _agents, _signal, onCard) => {
        onCard(older)
        return [older]
      },
      fetch: async (p) => {
        fetched.push(p.toString())
        return own
      },
      remember: c => { cached.push(c); return c },
      stats: newDiscoveryStats(),
      log: componentLogger(undefined, 'test'),
      onChange: () => {}
    })
    fetches.add([peerIdFromString(own.agent_id)], holder)
    await new Promise<void>(resolve => { const poll = (): void => { if (fetches.idle) resolve(); else setImmediate(poll) }; poll() })
    // before: the holder's card counted as the agent's, the agent was never asked, and the older card was cached
    expect(fetched).toEqual([own.agent_id])
    expect(fetches.ready).toEqual([own])
    expect(cached.map(c => c.seq)).not.toContain(1)
  })
})
