/**
 * A discover whose provider cannot be reached: the agent's address takes the
 * connection and never speaks (as a NATed agent's unroutable address, or a
 * host that drops the handshake, makes the dial hang). Each of a discover's
 * fetches is bounded by CARD_FETCH_TIMEOUT_MS; once the agent's call has
 * gone CARD_DHT_FALLBACK_AFTER_MS unanswered, the agent's DHT record is read
 * beside it, within the bound (card-fetch.ts). Before, the record was read
 * only after the call failed, and the call took the whole bound
 * (test/net/no-relay.test.ts relied on a loopback address that failed fast).
 */
import { createServer, type Server, type Socket } from 'node:net'
import { afterAll, describe, expect, it } from 'vitest'
import { DHT_PUT_TIMEOUT_MS } from '../src/constants.ts'
import { cardRecordKey, encodeCardRecord } from '../src/card/card.ts'
import type { CardOrigin } from '../src/card/fetch-order.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { until, waitForRouting } from './helpers.ts'

const cap = { capability_id: 'cap:unreachable', version: '1.0.0' }

describe('a discover of an agent whose node cannot be reached', () => {
  const nodes: MeshNode[] = []
  const held: Socket[] = []
  let silent: Server | undefined
  async function node (): Promise<MeshNode> {
    const n = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
    await n.start()
    nodes.push(n)
    return n
  }
  afterAll(async () => {
    for (const s of held) s.destroy()
    await new Promise<void>(resolve => { if (silent === undefined) resolve(); else silent.close(() => { resolve() }) })
    await Promise.all(nodes.map(async n => n.stop()))
  })

  it('gets the card from the agent\'s DHT record within the fetch\'s bound', async () => {
    // three nodes that know one another, so each has run its first DHT self-query (kad-dht holds every
    // lookup of a node until that has ended, and a new node's would meet the silent address below)
    const holder = await node()
    const agent = await node()
    const asker = await node()
    expect(await agent.join(holder.addresses)).toBe(1)
    expect(await asker.join(holder.addresses)).toBe(1)
    await waitForRouting([holder, agent, asker], 2)
    const card = await agent.discovery.publish({ name: 'behind a wall', capabilities: [cap] }, { announce: false })
    // the provider records, and the card record, in the DHT
    expect(await agent.discovery.announce()).toBeGreaterThan(0)
    let stored = 0
    for await (const ev of agent.host.services.dht.put(cardRecordKey(agent.agentId), encodeCardRecord(card), { signal: AbortSignal.timeout(DHT_PUT_TIMEOUT_MS) })) {
      if (ev.name === 'PEER_RESPONSE' && ev.messageName === 'PUT_VALUE') stored++
    }
    expect(stored).toBeGreaterThan(0)

    // the agent's node goes, and its address now takes connections and never answers: a dial there hangs
    const [address] = agent.addresses
    const port = Number(/\/tcp\/(\d+)/.exec(address ?? '')?.[1])
    await agent.stop()
    silent = createServer(socket => { held.push(socket) })
    await new Promise<void>((resolve, reject) => {
      silent!.once('error', reject)
      silent!.listen(port, '127.0.0.1', () => { resolve() })
    })

    // the holder's DHT answer names the agent, at the silent address; the asker has no card of it cached (fresh)
    const origins: CardOrigin[] = []
    const found = await asker.discover({ capability: cap }, { fresh: true, explain: (o) => { origins.push(o) } })
    expect(found).toEqual([card])
    // the agent was dialed (and never answered); the record was the answer
    await until(() => held.length > 0, 'the dial to reach the silent address')
    expect(origins.map(o => [o.agent_id, o.source])).toEqual([[card.agent_id, 'dht']])
    expect(asker.discovery.stats.dhtFallbacks).toBe(1)
    expect(asker.discovery.stats.fetchedCards).toBe(0)
    expect(asker.discovery.stats.providerFetchTimeouts).toBe(0)
  }, 60_000)
})
