import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { DISCOVER_TIMEOUT_MAX_MS } from '../src/card/constants.ts'
import type { CardOrigin } from '../src/card/discovery.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll } from './helpers.ts'

describe('discovery across a 5-node mesh with no central server', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => {
    nodes = await startMesh(6)
    const provider = nodes[2]!
    await provider.publishCard({
      name: 'reviewer',
      description: 'reviews code',
      capabilities: [{ capability_id: 'cap:code-review', version: '2.1.0' }],
      tags: ['review', 'typescript']
    })
    expect(await provider.discovery.announce()).toBeGreaterThan(0)
  })
  afterAll(async () => { await stopAll(nodes) })

  it('finds the agent by capability and version, by capability id alone, and by tag, from every other node', async () => {
    const provider = nodes[2]!
    for (const n of nodes) {
      if (n === provider) continue
      const byVersion = await n.discover({ capability: { capability_id: 'cap:code-review', version: '2.1.0' } })
      expect(byVersion.map(c => c.agent_id)).toEqual([provider.agentId])
      const byId = await n.discover({ capability: { capability_id: 'cap:code-review', version: null } })
      expect(byId.map(c => c.agent_id)).toEqual([provider.agentId])
      const byTag = await n.discover({ tags: ['review'] })
      expect(byTag.map(c => c.agent_id)).toEqual([provider.agentId])
      expect(byTag[0]!.capabilities).toEqual([{ capability_id: 'cap:code-review', version: '2.1.0' }])
    }
  })

  it('returns an empty list for a capability nobody offers, and for a version nobody offers', async () => {
    expect(await nodes[0]!.discover({ capability: { capability_id: 'cap:nothing', version: '1.0.0' } })).toEqual([])
    expect(await nodes[0]!.discover({ capability: { capability_id: 'cap:code-review', version: '9.9.9' } })).toEqual([])
  })

  it('takes a caller\'s time budget, at most DISCOVER_TIMEOUT_MAX_MS, and refuses one that is not a positive number of ms with a typed error', async () => {
    const cap = { capability: { capability_id: 'cap:code-review', version: '2.1.0' } }
    // the deadlines the discovers set themselves (before: always DISCOVER_TIMEOUT_MS)
    const budgets: number[] = []
    const timeout = AbortSignal.timeout.bind(AbortSignal)
    const spy = vi.spyOn(AbortSignal, 'timeout').mockImplementation((ms) => { budgets.push(ms); return timeout(ms) })
    try {
      expect((await nodes[1]!.discover(cap, { timeoutMs: 10_000 })).map(c => c.agent_id)).toEqual([nodes[2]!.agentId])
      expect(budgets).toContain(10_000)
      await nodes[1]!.discover(cap, { timeoutMs: DISCOVER_TIMEOUT_MAX_MS + 1 })
      expect(budgets).toContain(DISCOVER_TIMEOUT_MAX_MS)
      expect(budgets).not.toContain(DISCOVER_TIMEOUT_MAX_MS + 1)
    } finally {
      spy.mockRestore()
    }
    for (const timeoutMs of [0, -5, Number.NaN]) {
      await expect(nodes[1]!.discover(cap, { timeoutMs })).rejects.toMatchObject({ code: 'INVALID_REQUEST' })
    }
  })

  it('says where each card came from: the agent when asked fresh, then this node\'s cache', async () => {
    const provider = nodes[2]!
    const asker = nodes[4]!
    const cap = { capability: { capability_id: 'cap:code-review', version: '2.1.0' } }
    const seen = async (opts: { fresh?: boolean } = {}): Promise<CardOrigin[]> => {
      const origins: CardOrigin[] = []
      const found = await asker.discover(cap, { ...opts, explain: (o) => { origins.push(o) } })
      expect(found.map(c => c.agent_id)).toEqual([provider.agentId])
      return origins
    }
    const fresh = await seen({ fresh: true })
    expect(fresh.map(o => [o.agent_id, o.source])).toEqual([[provider.agentId, 'agent']])
    expect(fresh[0]!.ms).toBeGreaterThanOrEqual(0)
    const again = await seen()
    expect(again.map(o => [o.agent_id, o.source])).toEqual([[provider.agentId, 'cache']])
    // whoever's DHT answer named the provider is said (this node's own records name nobody)
    for (const o of [...fresh, ...again]) if (o.named_by !== undefined) expect(nodes.map(n => n.agentId)).toContain(o.named_by)
  })
})
