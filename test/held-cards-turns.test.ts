/**
 * A discover asks its first two contacts by key at once, and a holder's card
 * becomes a result only once another source names its agent (fetch-order.ts
 * `backed`). Card checks are synchronous, so an answer verified card after
 * card without giving the event loop a turn was verified whole before the
 * other contact's answer was even read, and the second answer was verified
 * whole too before the discover, which had its cards after the fourth, could
 * stop it: with two contacts that hold the same 15 cards (what fits in an
 * answer frame) and a discover that wants 4, the asker verified 25 cards.
 * askHolder now gives the loop a turn between two cards, so the answers are
 * verified alternately, each one's first cards back the other's, and the
 * discover stops the rest once it has its 4 (9 cards verified).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { issueCard, type AgentCard } from '../src/card/card.ts'
import { CARD_HELD_ASK_MAX, CARD_MAX_FRAME_BYTES, CARD_PROTOCOL } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { holdsOwnConnection } from '../src/wire/dial.ts'
import { kadRoutingTable } from '../src/wire/kad-internals.ts'
import { serve } from '../src/wire/rpc.ts'
import { draft, newKey } from './card-fixtures.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const LIMIT = 4
/** Room an answer leaves for its envelope in one frame (as held-cards.ts leaves). */
const ENVELOPE_BYTES = 256

describe('two contacts asked by key at once, holding the same cards', () => {
  let nodes: MeshNode[] = []
  let cards: AgentCard[] = []
  /** Who answered get_held_cards by key, in the order the answers were sent. */
  const answered: string[] = []

  beforeAll(async () => {
    nodes = await startMesh(3, { transport: 'tcp' })
    // agents that exist nowhere but in these cards: only the other holder's card of one can back it
    const made = await Promise.all(Array.from({ length: CARD_HELD_ASK_MAX }, async () => issueCard(await newKey(), draft, 1)))
    // as many as one answer frame carries
    let room = CARD_MAX_FRAME_BYTES - ENVELOPE_BYTES
    cards = made.filter(c => (room -= Buffer.byteLength(JSON.stringify(c)) + 1) >= 0)
    const [a, b, asker] = nodes as [MeshNode, MeshNode, MeshNode]
    let sent: Promise<void> = Promise.resolve()
    for (const n of [a, b]) {
      await n.host.unhandle(CARD_PROTOCOL)
      await serve(n.host, {
        protocol: CARD_PROTOCOL,
        maxFrameBytes: CARD_MAX_FRAME_BYTES,
        methods: {
          get_card: { handle: async () => ({ card: n.card }) },
          get_held_cards: {
            // the second contact's answer goes out a turn after the first's: which is read first does not depend on the scheduler
            handle: async (body) => {
              if ((body as { key?: string }).key === undefined) return { cards: [] }
              const turn = sent.then(() => { answered.push(n.agentId) })
              sent = turn.then(async () => new Promise<void>(resolve => { setImmediate(resolve) }))
              await turn
              return { cards }
            }
          }
        }
      })
    }
    // contacts are connections the asker opened, in its routing table
    for (const n of [a, b]) {
      if (asker.host.getConnections(n.host.peerId).some(c => c.direction === 'outbound')) continue
      for (const c of asker.host.getConnections(n.host.peerId)) await c.close()
      await asker.host.dial(n.host.getMultiaddrs())
    }
    await until(() => [a, b].every(n => holdsOwnConnection(asker.host, n.host.peerId)), 'a connection the asker opened to each contact')
    const table = kadRoutingTable(asker.host.services.dht)!
    await until(() => table.closestPeers(new Uint8Array(32), { count: 20 }).length >= 2, 'both contacts in the asker\'s routing table')
  })
  afterAll(async () => { await stopAll(nodes) })

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
    // verified alternately: a few of each; one after the other it was every card of both answers
    const received = stats.heldCardsReceived - before.received
    expect(received).toBeGreaterThanOrEqual(LIMIT + 1)
    expect(cards.length).toBeGreaterThanOrEqual(3 * LIMIT)
    expect(received).toBeLessThan(cards.length)
  })
})
