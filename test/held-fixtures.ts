/**
 * Holders that answer get_held_cards by key as a test says, and an asker
 * whose lookup asks them first (held-cards-seed, held-cards-turns).
 */
import { CARD_MAX_FRAME_BYTES, CARD_PROTOCOL } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { holdsOwnConnection } from '../src/wire/dial.ts'
import { kadRoutingTable } from '../src/wire/kad-internals.ts'
import { serve } from '../src/wire/rpc.ts'
import { until } from './helpers.ts'

/** `n` serves the card protocol anew: its own card, and `byKey` for get_held_cards by key (by agent: no cards). */
export async function serveHeldByKey (n: MeshNode, byKey: (body: { key: string, seed?: unknown }) => Promise<{ cards: unknown[] }>): Promise<void> {
  await n.host.unhandle(CARD_PROTOCOL)
  await serve(n.host, {
    protocol: CARD_PROTOCOL,
    maxFrameBytes: CARD_MAX_FRAME_BYTES,
    methods: {
      get_card: { handle: async () => ({ card: n.card }) },
      get_held_cards: {
        handle: async (body) => {
          const b = body as { key?: string, seed?: unknown }
          return b.key === undefined ? { cards: [] } : byKey({ ...b, key: b.key })
        }
      }
    }
  })
}

/** Contacts are connections the asker opened, in its routing table: its lookup's first round asks them all. */
export async function contactsOf (asker: MeshNode, contacts: MeshNode[]): Promise<void> {
  for (const n of contacts) {
    if (asker.host.getConnections(n.host.peerId).some(c => c.direction === 'outbound')) continue
    for (const c of asker.host.getConnections(n.host.peerId)) await c.close()
    await asker.host.dial(n.host.getMultiaddrs())
  }
  await until(() => contacts.every(n => holdsOwnConnection(asker.host, n.host.peerId)), 'a connection the asker opened to each contact')
  const table = kadRoutingTable(asker.host.services.dht)!
  await until(() => table.closestPeers(new Uint8Array(32), { count: 20 }).length >= contacts.length, 'the contacts in the asker\'s routing table')
}
