/**
 * An agent whose new card changes what it says under a key it still names
 * (protocols/card.md, holders): every key the new card names is walked once
 * more, so the peers near it that hold the agent's card pull the new one and
 * stop handing out the older card. Before, a key still named and settled was
 * skipped for ANNOUNCE_REWALK_MS: no ADD_PROVIDER reached its holders, and
 * they handed out the older card until it was due (CARD_REPUBLISH_INTERVAL_MS),
 * a card for a capability version (cap:x@1 when the agent now serves cap:x@2,
 * both under one key) or a tag the agent dropped. Found by session 59's
 * review. Real nodes over TCP on 127.0.0.1, the announcements real.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityKey, type AgentCard, type CardDraft } from '../src/card/card.ts'
import { CARD_HELD_PULL_MIN_INTERVAL_MS, CARD_MAX_FRAME_BYTES, CARD_PROTOCOL } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { heldSeqs, storedRecordHolders } from './fixtures/dht-records.ts'

const K = 3
const NODES = 6
const V1 = { capability_id: 'cap:versioned', version: '1.0.0' }
const V2 = { capability_id: 'cap:versioned', version: '2.0.0' }
const TAGGED = { capability_id: 'cap:tagged', version: '1.0.0' }
const TAG = 'dropped-tag'

describe('an agent whose new card changes what a key it still names covers', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => {
    nodes = await startMesh(NODES, { transport: 'tcp', nodeOptions: () => ({ dht: { k: K, alpha: K, disjointPaths: 1 } }) })
  })
  afterAll(async () => { await stopAll(nodes) })

  /**
   * Publish `first`, wait until the peers that keep the agent's provider record under `capabilityId`'s key hand it
   * out, then publish `second` (same key) and wait until they hand out that one. Returns both cards.
   */
  async function change (agent: MeshNode, capabilityId: string, first: CardDraft, second: CardDraft): Promise<{ first: AgentCard, second: AgentCard }> {
    const key = await capabilityKey(capabilityId)
    const v1 = await agent.discovery.publish(first)
    expect(await agent.discovery.announce()).toBeGreaterThan(0)
    // the peers that took the key's records: those that hold the agent's card because of them
    const holders = (await storedRecordHolders(nodes, agent, key)).map(n => peerIdOfAgent(n.agentId))
    // the agent asks: a holder never is the agent, so every holder is asked
    const client = new RpcClient(agent.host, { protocol: CARD_PROTOCOL, maxFrameBytes: CARD_MAX_FRAME_BYTES })
    try {
      const handedOut = async (): Promise<number[]> => heldSeqs(client, holders, peerIdOfAgent(agent.agentId))
      await until(async () => (await handedOut()).every(seq => seq === v1.seq), 'the holders to hand out the first card')
      // as CARD_HELD_PULL_MIN_INTERVAL_MS later: the holders may pull the agent's card again
      for (const n of nodes) {
        const pulledAt = (n.discovery as unknown as { held: { pulledAt: Map<string, number> } }).held.pulledAt
        pulledAt.set(agent.agentId, (pulledAt.get(agent.agentId) ?? Date.now()) - CARD_HELD_PULL_MIN_INTERVAL_MS)
      }
      const walks = agent.discovery.stats.providerWalks
      const v2 = await agent.discovery.publish(second)
      await agent.discovery.announce()
      // before: no record went out for the key, and every holder there handed out the first card for 20 min
      await until(async () => (await handedOut()).every(seq => seq === v2.seq), 'the holders to hand out the new card')
      // the key still named was walked again although its records went out moments ago
      expect(agent.discovery.stats.providerWalks).toBeGreaterThan(walks)
      return { first: v1, second: v2 }
    } finally {
      client.close()
    }
  }

  it('walks its capability key again when only the version changed: the holders there hand out the new card', async () => {
    const [agent, asker] = nodes as [MeshNode, MeshNode]
    const { second } = await change(agent, V1.capability_id, { name: 'versioned', capabilities: [V1] }, { name: 'versioned', capabilities: [V2] })
    expect((await asker.discover({ capability: V1 })).filter(c => c.agent_id === agent.agentId)).toEqual([])
    expect((await asker.discover({ capability: V2 })).filter(c => c.agent_id === agent.agentId).map(c => c.seq)).toEqual([second.seq])
  }, 90_000)

  it('walks its capability key again when a tag was dropped: the holders there hand out the new card', async () => {
    const [, , agent, asker] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    await change(agent, TAGGED.capability_id, { name: 'tagged', capabilities: [TAGGED], tags: [TAG] }, { name: 'tagged', capabilities: [TAGGED] })
    expect((await asker.discover({ tags: [TAG] })).filter(c => c.agent_id === agent.agentId)).toEqual([])
  }, 90_000)

  it('does not walk a settled key again for a card re-signed with the same draft', async () => {
    const agent = nodes[4] as MeshNode
    const a = { capability_id: 'cap:resigned-a', version: '1.0.0' }
    const b = { capability_id: 'cap:resigned-b', version: '1.0.0' }
    await agent.discovery.publish({ name: 'same', capabilities: [a, b], tags: ['resigned', 'again'] })
    expect(await agent.discovery.announce()).toBe(4)
    // a key whose walk came out short (a busy machine) is walked again by any announcement: only the settled ones count
    const provided = (agent.discovery as unknown as { announcer: { provided: Map<string, { settled: boolean }> } }).announcer.provided
    const short = [...provided.values()].filter(e => !e.settled).length
    expect(short).toBeLessThan(4)
    const walks = agent.discovery.stats.providerWalks
    // the same draft in another order is the same draft
    await agent.discovery.publish({ name: 'same', capabilities: [b, a], tags: ['again', 'resigned', 'again'] })
    expect(await agent.discovery.announce()).toBe(4)
    expect(agent.discovery.stats.providerWalks - walks).toBe(short)
  }, 90_000)
})
