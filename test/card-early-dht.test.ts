/**
 * getCard of an agent this node knows no address of: reaching the agent
 * needs a DHT peer lookup first, so the DHT GET of its card starts beside the
 * call to it instead of after the call gave up (CARD_FETCH_TIMEOUT_MS later).
 * An agent the node is connected to is asked alone, as before.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cardRecordKey, encodeCardRecord, issueCard } from '../src/card/card.ts'
import { DHT_PUT_TIMEOUT_MS } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { draft, newKey } from './card-fixtures.ts'
import { startMesh, stopAll } from './helpers.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }

describe('the DHT GET of a card starts beside the call to an agent of no known address', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(4)
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    await C.publishCard({ name: 'reviewer', capabilities: [REVIEW] })
    expect(await A.join(C.addresses)).toBe(1)
  })
  afterAll(async () => { await stopAll(nodes) })

  it('finds the DHT card of an agent no node ever reached, with the GET started at once', async () => {
    // an agent whose card record is in the DHT, but which never ran a node here: no address anywhere
    const key = await newKey()
    const card = await issueCard(key, { ...draft, name: 'ghost' }, 1)
    for await (const ev of B.host.services.dht.put(cardRecordKey(card.agent_id), encodeCardRecord(card), { signal: AbortSignal.timeout(DHT_PUT_TIMEOUT_MS) })) expect(ev.name).not.toBe('QUERY_ERROR')
    const before = { ...A.discovery.stats }
    const sources: string[] = []
    expect(await A.discovery.getCard(card.agent_id, { fresh: true, source: (s) => { sources.push(s) } })).toEqual(card)
    expect(A.discovery.stats.earlyDhtGets - before.earlyDhtGets).toBe(1)
    expect(A.discovery.stats.dhtFallbacks - before.dhtFallbacks).toBe(1)
    expect(sources).toEqual(['dht'])
  })

  it('asks a connected agent alone', async () => {
    const before = { ...A.discovery.stats }
    const got = await A.discovery.getCard(C.agentId, { fresh: true })
    expect(got.agent_id).toBe(C.agentId)
    expect(A.discovery.stats.earlyDhtGets - before.earlyDhtGets).toBe(0)
    expect(A.discovery.stats.fetchedCards - before.fetchedCards).toBe(1)
  })
})
