/**
 * A node re-signs its card when it is close to expiry (currentCard). Every
 * get_card that finds it so meanwhile waits for one re-signing, not one each;
 * and a re-signing queued behind the publication of a new draft re-signs that
 * new draft, never the card as it was when the re-signing was asked for.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AgentCard } from '../src/card/card.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll } from './helpers.ts'

interface Internals { own: AgentCard, publish: MeshNode['discovery']['publish'] }

describe('re-signing a card near its expiry', () => {
  let nodes: MeshNode[] = []
  let n: MeshNode
  beforeAll(async () => {
    nodes = await startMesh(1)
    n = nodes[0]!
    await n.publishCard({ name: 'first', capabilities: [{ capability_id: 'cap:first', version: '1.0.0' }] })
  })
  afterAll(async () => { await stopAll(nodes) })

  const nearExpiry = (): void => {
    const d = n.discovery as unknown as Internals
    d.own = { ...d.own, expires_at: new Date(Date.now() + 1000).toISOString() }
  }

  it('is done once for every caller that finds the card near expiry meanwhile', async () => {
    const d = n.discovery as unknown as Internals
    const publish = d.publish.bind(n.discovery)
    let publishes = 0
    d.publish = async (...args) => { publishes++; return publish(...args) }
    try {
      nearExpiry()
      const cards = await Promise.all(Array.from({ length: 5 }, async () => n.discovery.currentCard()))
      expect(publishes).toBe(1)
      expect(new Set(cards.map(c => c?.seq)).size).toBe(1)
      expect(Date.parse(cards[0]!.expires_at)).toBeGreaterThan(Date.now() + 60_000)
    } finally {
      d.publish = publish
    }
  })

  it('re-signs the draft published before it, not the card as it was', async () => {
    nearExpiry()
    const published = n.publishCard({ name: 'second', capabilities: [{ capability_id: 'cap:second', version: '1.0.0' }] })
    const current = n.discovery.currentCard()
    await published
    await current
    expect(n.card?.name).toBe('second')
    expect(n.card?.capabilities.map(c => c.capability_id)).toEqual(['cap:second'])
  })
})
