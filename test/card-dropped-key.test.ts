/**
 * An agent that drops a capability (protocols/card.md, holders): the key it
 * no longer names is walked once more before it is withdrawn, so the peers
 * near that key that hold its card pull the new one and stop handing out the
 * older card, which still names the capability the agent now refuses. Before,
 * a dropped key was only withdrawn (no record went out), and its holders
 * handed out the older card until it was due (CARD_REPUBLISH_INTERVAL_MS).
 * Found by session 56's review of its own change (5420342). Real nodes over
 * TCP on 127.0.0.1, the announcements real.
 */
import type { PeerId } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityKey } from '../src/card/card.ts'
import { CARD_HELD_PULL_MIN_INTERVAL_MS, CARD_MAX_FRAME_BYTES, CARD_PROTOCOL } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { heldSeqs } from './fixtures/dht-records.ts'

const K = 3
const NODES = 6
const DROPPED = { capability_id: 'cap:dropped-by-its-agent', version: '1.0.0' }
const KEPT = { capability_id: 'cap:kept-by-its-agent', version: '1.0.0' }

describe('an agent that drops a capability', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => {
    nodes = await startMesh(NODES, { transport: 'tcp', nodeOptions: () => ({ dht: { k: K, alpha: K, disjointPaths: 1 } }) })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('walks the dropped key once more: the holders there hand out its new card', async () => {
    const [agent, asker] = nodes as [MeshNode, MeshNode]
    const key = await capabilityKey(DROPPED.capability_id)
    const first = await agent.discovery.publish({ name: 'dropper', capabilities: [DROPPED, KEPT] })
    expect(await agent.discovery.announce()).toBeGreaterThan(0)
    // the peers that took the dropped key's records: those that hold the agent's card because of them
    // (an ADD_PROVIDER has no answer: a peer stores the record a moment after the announce returns)
    let holders: PeerId[] = []
    await until(async () => {
      holders = []
      for (const n of nodes) {
        if (n === agent) continue
        const providers = await (n.host.services.dht as unknown as { providers: { getProviders: (k: unknown) => Promise<PeerId[]> } }).providers.getProviders(key)
        if (providers.some(p => p.toString() === agent.agentId)) holders.push(peerIdOfAgent(n.agentId))
      }
      return holders.length > 0
    }, 'a peer to store the dropped key\'s record')
    const client = new RpcClient(asker.host, { protocol: CARD_PROTOCOL, maxFrameBytes: CARD_MAX_FRAME_BYTES })
    try {
      const handedOut = async (): Promise<number[]> => {
        const seqs = await heldSeqs(client, holders, peerIdOfAgent(agent.agentId))
        return seqs.map((seq, i) => holders[i]!.toString() === asker.agentId ? 0 : seq)
      }
      const asked = holders.filter(h => h.toString() !== asker.agentId)
      expect(asked.length).toBeGreaterThan(0)
      await until(async () => (await handedOut()).filter(seq => seq === first.seq).length === asked.length, 'the holders to hand out the first card')
      // as CARD_HELD_PULL_MIN_INTERVAL_MS later: the holders may pull the agent's card again
      for (const n of nodes) {
        const pulledAt = (n.discovery as unknown as { held: { pulledAt: Map<string, number> } }).held.pulledAt
        pulledAt.set(agent.agentId, (pulledAt.get(agent.agentId) ?? Date.now()) - CARD_HELD_PULL_MIN_INTERVAL_MS)
      }
      const second = await agent.discovery.publish({ name: 'dropper', capabilities: [KEPT] })
      await agent.discovery.announce()
      // a last walk that a busy machine let run past the announcement's time is kept, and the next one walks it
      for (let i = 0; i < 3 && agent.discovery.stats.withdrawnKeys === 0; i++) await agent.discovery.announce()
      expect(agent.discovery.stats.withdrawnKeys).toBe(1)
      // before: no record went out for the dropped key, and every holder handed out the first card for 20 min
      await until(async () => (await handedOut()).filter(seq => seq === second.seq).length === asked.length, 'the holders to hand out the new card')
    } finally {
      client.close()
    }
  }, 90_000)
})
