/**
 * Providers on connections this node opened (CardFetches `preferred`) go
 * first only within their namer's turn and within the fetches the dial rule
 * allows (src/card/fetch-order.ts, provider-queue.ts takeInTurn). Before, any
 * pending preferred provider was asked ahead of every namer's turn and past
 * "in flight ≤ wanted": a hostile peer whose DHT answer named its Sybils
 * (kad-dht dialed them on its word, so this node holds connections it opened
 * to them) filled all DISCOVER_FETCH_CONCURRENCY fetches with Sybils that
 * take get_card and never answer, and an honest provider another peer named
 * waited out wave after wave of CARD_FETCH_TIMEOUT_MS, past the discover's
 * DISCOVER_TIMEOUT_MS.
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

async function newPeer (): Promise<PeerId> {
  return peerIdFromString(agentIdOf(await newKey()))
}

const settled = async (): Promise<void> => { for (let i = 0; i < 5; i++) await new Promise(resolve => setImmediate(resolve)) }

/**
 * A liar names `decoys` (not connected) and then 20 Sybils on connections this node opened, all of whose fetches
 * hang; then a friend names the honest agent. Each round every hanging fetch fails (a timeout wave). Returns the
 * order of asking and the rounds it took until the honest agent was asked.
 */
async function liarAndFriend (decoys: number): Promise<{ fetched: string[], honest: string, rounds: number }> {
  const honest = await issueCard(await newKey(), draft, 1)
  const dead = await Promise.all(Array.from({ length: decoys }, newPeer))
  const sybils = await Promise.all(Array.from({ length: 20 }, newPeer))
  const sybilIds = new Set(sybils.map(p => p.toString()))
  const [liar, friend] = [await newPeer(), await newPeer()]
  const fetched: string[] = []
  const hanging: Array<() => void> = []
  const fetches = new CardFetches<AgentCard>({
    self: await newPeer(),
    wanted: () => 1,
    matches: () => true,
    signal: AbortSignal.timeout(60_000),
    stopped: new AbortController().signal,
    connected: p => sybilIds.has(p.toString()),
    preferred: p => sybilIds.has(p.toString()),
    known: () => false,
    fetch: async (p) => {
      fetched.push(p.toString())
      if (p.toString() === honest.agent_id) return honest
      return new Promise<AgentCard>((_resolve, reject) => { hanging.push(() => { reject(new Error('timed out')) }) })
    },
    remember: c => c,
    stats: newDiscoveryStats(),
    log: componentLogger(undefined, 'test'),
    onChange: () => {}
  })
  fetches.add([...dead, ...sybils], liar)
  fetches.add([peerIdFromString(honest.agent_id)], friend)
  let rounds = 0
  while (!fetched.includes(honest.agent_id) && hanging.length > 0) {
    // CARD_FETCH_TIMEOUT_MS ends every fetch in flight
    for (const fail of hanging.splice(0)) fail()
    await settled()
    fetches.drain()
    rounds++
  }
  await settled()
  expect(fetches.ready.map(c => c.agent_id)).toEqual([honest.agent_id])
  for (const fail of hanging.splice(0)) fail()
  await settled()
  return { fetched, honest: honest.agent_id, rounds }
}

describe('providers on connections this node opened, named by a hostile peer (CardFetches `preferred`)', () => {
  it('do not take every fetch: an honest provider another peer named is asked after one wave, not after all of theirs', async () => {
    const { fetched, honest, rounds } = await liarAndFriend(0)
    // one card wanted plus one spare of the liar's, then the friend's turn (before: index 20, after 3 waves)
    expect(fetched.indexOf(honest)).toBeLessThanOrEqual(2)
    expect(rounds).toBeLessThanOrEqual(1)
  })

  it('take their namer\'s turn, not the next namer\'s: a dead first pick does not keep the liar\'s turn for its Sybils', async () => {
    const { fetched, honest, rounds } = await liarAndFriend(1)
    expect(fetched.indexOf(honest)).toBeLessThanOrEqual(2)
    expect(rounds).toBeLessThanOrEqual(1)
  })
})

describe('nextProvider with namers: a preferred provider goes first within its namer\'s turn', () => {
  const connected = (p: string): boolean => p.startsWith('c')

  it('takes the connected pick of the namer whose turn it is, not another namer\'s', () => {
    // d1 named by namer 0, d2 and c1 by namer 1: namer 0's turn
    const namers = [0, 1, 1]
    expect(nextProvider(['d1', 'd2', 'c1'], connected, 0, 4, i => namers[i]!)).toBe(0)
    // d1 and c1 by namer 0: its connected pick first
    const same = [0, 1, 0]
    expect(nextProvider(['d1', 'd2', 'c1'], connected, 0, 4, i => same[i]!)).toBe(2)
  })

  it('holds back a dial, not a connected pick, for the cards holders may still send; never past the spare fetch', () => {
    expect(nextProvider(['d1', 'c1'], connected, 0, 1, () => 0, 2)).toBe(1)
    expect(nextProvider(['d1', 'd2'], connected, 0, 1, () => 0, 2)).toBe(-1)
    expect(nextProvider(['c1', 'c2'], connected, 2, 1)).toBe(-1)
  })
})
