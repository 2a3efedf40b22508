/**
 * A cached card that lacks a capability is fetched again once per agent at a
 * time (card-refresh.ts). A caller that comes while that fetch runs waits for
 * it; before, it took the cached older card and was refused
 * CAPABILITY_NOT_SUPPORTED although the agent's card, being fetched that
 * moment, declares the capability.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll } from './helpers.ts'

const ONE = { capability_id: 'cap:concurrent-one', version: '1.0.0' }
const TWO = { capability_id: 'cap:concurrent-two', version: '1.0.0' }

describe('concurrent callers right after a card adds a capability', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => { nodes = await startMesh(3) })
  afterAll(async () => { await stopAll(nodes) })

  it('delegations: none is refused from the cached older card, and the agent is asked once', async () => {
    const agent = nodes[1]!
    const asker = nodes[2]!
    await agent.publishCard({ name: 'w', capabilities: [ONE] })
    await asker.discovery.getCard(agent.agentId, { fresh: true }) // cached: lacks TWO
    agent.runs.handle(TWO, async () => ({ ok: true }))
    await agent.publishCard({ name: 'w', capabilities: [ONE, TWO] })
    const refreshes = asker.discovery.stats.mismatchRefreshes
    const outcomes = await Promise.allSettled([1, 2, 3].map(async i =>
      asker.delegate({ to_agent: agent.agentId, task_id: `card-refresh-concurrent-${i}`, capability: TWO, input: {} })))
    expect(outcomes.filter(o => o.status === 'rejected').map(o => (o as PromiseRejectedResult).reason?.code)).toEqual([])
    expect(asker.discovery.stats.mismatchRefreshes - refreshes).toBe(1)
  })

  it('getCard: every caller that wants what the cached card lacks gets the newer card', async () => {
    const agent = nodes[0]!
    const asker = nodes[2]!
    await agent.publishCard({ name: 'v', capabilities: [ONE] })
    await asker.discovery.getCard(agent.agentId, { fresh: true })
    const newer = await agent.publishCard({ name: 'v', capabilities: [ONE, TWO] })
    const wants = (c: { capabilities: Array<{ capability_id: string }> }): boolean => c.capabilities.some(x => x.capability_id === TWO.capability_id)
    const got = await Promise.all([1, 2, 3, 4].map(async () => asker.discovery.getCard(agent.agentId, { wants })))
    expect(got.map(c => c.seq)).toEqual([newer.seq, newer.seq, newer.seq, newer.seq])
  })
})
