/**
 * A card update that adds a capability. A node that cached the agent's
 * previous card (CARD_CACHE_TTL_MS) still finds the agent for the new
 * capability, and does not refuse a delegate to it with
 * CAPABILITY_NOT_SUPPORTED without asking: the agent declares it. A cached
 * card that lacks what is asked of it is fetched again, at most once per
 * CARD_MISMATCH_REFRESH_MS per agent. Found by session 45's review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll } from './helpers.ts'
import { CARD_CACHE_TTL_MS } from '../src/constants.ts'
import { CARD_MISMATCH_REFRESH_MS } from '../src/card/constants.ts'

const ONE = { capability_id: 'cap:one', version: '1.0.0' }
const TWO = { capability_id: 'cap:two', version: '1.0.0' }

describe('a cached older card and a new capability', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => {
    nodes = await startMesh(4)
  })
  afterAll(async () => { await stopAll(nodes) })

  it('discover finds the agent for a capability its new card adds, though the old card is cached', async () => {
    const agent = nodes[1]!
    const asker = nodes[3]!
    await agent.publishCard({ name: 'w', capabilities: [ONE] })
    expect(await agent.discovery.announce()).toBeGreaterThan(0)
    expect((await asker.discover({ capability: ONE })).map(c => c.agent_id)).toEqual([agent.agentId])

    const v2 = await agent.publishCard({ name: 'w', capabilities: [ONE, TWO] })
    expect(await agent.discovery.announce()).toBeGreaterThan(0)
    // control: a fresh discover finds it at once
    expect((await asker.discover({ capability: TWO }, { fresh: true, limit: 1 })).map(c => c.seq)).toEqual([v2.seq])
  })

  it('without fresh, the same (the provider record of the new key proves a newer card)', async () => {
    const agent = nodes[2]!
    const asker = nodes[0]!
    await agent.publishCard({ name: 'w2', capabilities: [{ capability_id: 'cap:three', version: '1.0.0' }] })
    expect(await agent.discovery.announce()).toBeGreaterThan(0)
    expect((await asker.discover({ capability: { capability_id: 'cap:three', version: '1.0.0' } })).map(c => c.agent_id)).toEqual([agent.agentId])

    await agent.publishCard({ name: 'w2', capabilities: [{ capability_id: 'cap:three', version: '1.0.0' }, { capability_id: 'cap:four', version: '1.0.0' }] })
    expect(await agent.discovery.announce()).toBeGreaterThan(0)
    const found = await asker.discover({ capability: { capability_id: 'cap:four', version: '1.0.0' } })
    expect(found.map(c => c.agent_id)).toEqual([agent.agentId])
  })

  it('delegate of the new capability is not refused from the cached older card', async () => {
    const agent = nodes[2]!
    const asker = nodes[0]!
    agent.runs.handle({ capability_id: 'cap:four', version: '1.0.0' }, async () => ({ ok: true }))
    // the asker's cache still holds the card without cap:four (fetched in the test before, < 60 s ago)
    const run = await asker.delegate({ to_agent: agent.agentId, task_id: 'card-refresh-t1', capability: { capability_id: 'cap:four', version: '1.0.0' }, input: {}, parent_run: null })
    expect(run.agent_id).toBe(agent.agentId)
  })

  it('an agent that really lacks the capability is refused at once, and its card is fetched again at most once per CARD_MISMATCH_REFRESH_MS', async () => {
    const agent = nodes[1]!
    const asker = nodes[3]!
    await agent.publishCard({ name: 'w3', capabilities: [ONE] })
    await asker.discovery.getCard(agent.agentId, { fresh: true })
    const before = asker.discovery.stats.mismatchRefreshes
    const FIVE = { capability_id: 'cap:five', version: '1.0.0' }
    for (let i = 0; i < 3; i++) {
      await expect(asker.delegate({ to_agent: agent.agentId, task_id: `card-refresh-none-${i}`, capability: FIVE, input: {} }))
        .rejects.toMatchObject({ code: 'CAPABILITY_NOT_SUPPORTED' })
    }
    // the first fetched the card again (it still lacks cap:five), the others within CARD_MISMATCH_REFRESH_MS did not
    expect(asker.discovery.stats.mismatchRefreshes - before).toBe(1)
    expect(CARD_MISMATCH_REFRESH_MS).toBeLessThan(CARD_CACHE_TTL_MS)
  })
})
