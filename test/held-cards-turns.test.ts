/**
 * A discover asks its first two contacts by key at once with one pick seed,
 * and a holder's card becomes a result only once another source names its
 * agent (fetch-order.ts `backed`). Card checks are synchronous: the answer
 * read first was verified whole before the other was read, and the other
 * whole too before the discover, which had its cards after its fourth, could
 * stop it. With two contacts that hold the same 15 cards (what fits in an
 * answer frame) and a discover that wants 4, the asker verified 25 cards.
 * Now the first answer's cards beyond what the discover wants wait for the
 * other contact's answer, and an answer stops as soon as the discover's
 * results are ready (src/card/ask-pace.ts): 8 cards.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { issueCard, type AgentCard } from '../src/card/card.ts'
import { AgentNotFoundError } from '../src/errors.ts'
import { CARD_HELD_ASK_MAX, CARD_MAX_FRAME_BYTES } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { draft, newKey } from './card-fixtures.ts'
import { contactsOf, serveHeldByKey } from './held-fixtures.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const LIMIT = 4
/** Room an answer leaves for its envelope in one frame (as held-cards.ts leaves). */
const ENVELOPE_BYTES = 256

describe('two contacts asked by key at once, holding the same cards', () => {
  let nodes: MeshNode[] = []
  let cards: AgentCard[] = []
  /** Who answered get_held_cards by key, in the order the answers were sent. */
  const answered: string[] = []
  /** The second contact to answer refuses instead (the second case), or stays silent until released (the third). */
  let secondFails = false
  let secondSilent = false
  let releaseSilent: () => void = () => {}
  const silence = new Promise<void>(resolve => { releaseSilent = resolve })

  beforeAll(async () => {
    nodes = await startMesh(3, { transport: 'tcp' })
    // agents that exist nowhere but in these cards: only the other holder's card of one can back it
    const made = await Promise.all(Array.from({ length: CARD_HELD_ASK_MAX }, async () => issueCard(await newKey(), draft, 1)))
    // as many as one answer frame carries
    let room = CARD_MAX_FRAME_BYTES - ENVELOPE_BYTES
    cards = made.filter(c => (room -= Buffer.byteLength(JSON.stringify(c)) + 1) >= 0)
    const [a, b, asker] = nodes as [MeshNode, MeshNode, MeshNode]
    let sent: Promise<void> = Promise.resolve()
    // the second contact's answer goes out a turn after the first's: which is read first does not depend on the scheduler
    for (const n of [a, b]) {
      await serveHeldByKey(n, async () => {
        const turn = sent.then(() => { answered.push(n.agentId) })
        sent = turn.then(async () => new Promise<void>(resolve => { setImmediate(resolve) }))
        await turn
        if (secondFails && answered.length % 2 === 0) throw new AgentNotFoundError('this holder keeps no cards of the key')
        if (secondSilent && answered.length % 2 === 0) await silence
        return { cards }
      })
    }
    await contactsOf(asker, [a, b])
  })
  afterAll(async () => {
    releaseSilent()
    await stopAll(nodes)
  })

  it('verifies their answers in turns: the discover has its cards after a few of each, not after all of the first', async () => {
    const asker = nodes[2]!
    const stats = asker.discovery.stats
    const before = { received: stats.heldCardsReceived, asks: stats.heldKeyAsks }
    const found = await asker.discover({ capability: { capability_id: 'cap:translate', version: '1.0.0' } }, { limit: LIMIT, cache: false, timeoutMs: 10_000 })

    expect(answered).toHaveLength(2)
    expect(stats.heldKeyAsks - before.asks).toBe(2)
    // every result is one of the holders' cards, each backed by the other holder
    expect(found).toHaveLength(LIMIT)
    const held = new Set(cards.map(c => c.agent_id))
    for (const card of found) expect(held.has(card.agent_id)).toBe(true)
    // as many of each as the discover wants: the first waited with the rest of its cards for the second's answer,
    // whose first cards backed the first's. Verified each whole, it was every card of the one and most of the other.
    // Exact because card checks are synchronous (SignatureCache.verify): the second's first four are checked in one
    // go once it is read, whichever answer came first
    const received = stats.heldCardsReceived - before.received
    expect(cards.length).toBeGreaterThanOrEqual(3 * LIMIT)
    expect(received).toBe(2 * LIMIT)
  })

  it('the rest of the first answer waits only until the second ask ends: when that one fails, every card is verified and the discover ends', async () => {
    const asker = nodes[2]!
    const stats = asker.discovery.stats
    secondFails = true
    answered.length = 0
    const before = { ...stats }
    const added = (k: keyof typeof before): number => stats[k] - before[k]
    const found = await asker.discover({ capability: { capability_id: 'cap:translate', version: '1.0.0' } }, { limit: LIMIT, cache: false, timeoutMs: 10_000 })
    expect(answered).toHaveLength(2)
    expect(added('heldKeyAskFailures')).toBe(1)
    // nobody else names these agents: none is a result, and the discover ended on its own, not on its deadline
    expect(found).toEqual([])
    expect(added('heldCardsReceived')).toBe(cards.length)
    expect(added('discoversCutShort')).toBe(0)
  })

  it('a second contact that stays silent holds the rest of the first answer back briefly, not for its whole time limit', async () => {
    const asker = nodes[2]!
    const stats = asker.discovery.stats
    secondFails = false
    secondSilent = true
    answered.length = 0
    const before = { ...stats }
    const added = (k: keyof typeof before): number => stats[k] - before[k]
    const discover = asker.discover({ capability: { capability_id: 'cap:translate', version: '1.0.0' } }, { limit: LIMIT, cache: false, timeoutMs: 10_000 })
    // every card of the first answer checked (CARD_KEY_ANSWERS_WAIT_MS after its first ones) while the silent
    // contact's ask is still out: it fails only at its own limit, CARD_HELD_ASK_TIMEOUT_MS, ten times that
    await until(() => added('heldCardsReceived') >= cards.length, 'every card of the first answer checked')
    expect(added('heldKeyAskFailures')).toBe(0)
    expect(await discover).toEqual([])
    expect(added('heldKeyAskFailures')).toBe(1)
    expect(added('heldCardsReceived')).toBe(cards.length)
  })
})
