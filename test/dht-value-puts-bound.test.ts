/**
 * A bound on the DHT records (PUT_VALUE) one peer may have a node store
 * (src/wire/value-puts.ts): a token bucket per sender. The node-wide bound on
 * card records held (card-record-cap.test.ts) keeps the store small; this one
 * keeps a single stranger, minting a key per card, from filling it alone.
 * Real nodes; the stranger is a mesh node putting cards of keys it minted.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cardRecordKey, encodeCardRecord, issueCard } from '../src/card/card.ts'
import { DHT_PUT_TIMEOUT_MS, DHT_RECORD_DATASTORE_PREFIX } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { countRange } from '../src/storage/range.ts'
import { DHT_VALUE_PUTS_PER_PEER_BURST } from '../src/wire/network-constants.ts'
import { valuePutStats } from '../src/wire/value-puts.ts'
import type { Datastore } from 'interface-datastore'
import { draft, newKey } from './card-fixtures.ts'
import { startMesh, stopAll } from './helpers.ts'

/** Put a fresh stranger's card through `from`'s DHT; whether every replica took it (a refusal is a QUERY_ERROR of the put). */
async function putFreshCard (from: MeshNode): Promise<boolean> {
  const card = await issueCard(await newKey(), draft, 1)
  let refused = false
  for await (const ev of from.host.services.dht.put(cardRecordKey(card.agent_id), encodeCardRecord(card), { signal: AbortSignal.timeout(DHT_PUT_TIMEOUT_MS) })) {
    if (ev.name === 'QUERY_ERROR') refused = true
  }
  return !refused
}

describe('DHT records one peer may have a node store', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => { nodes = await startMesh(3) })
  afterAll(async () => { await stopAll(nodes) })

  it('a stranger\'s puts past its burst are refused and counted; another peer still has its put stored', async () => {
    const [stranger, victim, other] = nodes as [MeshNode, MeshNode, MeshNode]
    const store = (victim as unknown as { datastore: Datastore }).datastore
    const before = await countRange(store, DHT_RECORD_DATASTORE_PREFIX)
    const extra = 4
    for (let i = 0; i < DHT_VALUE_PUTS_PER_PEER_BURST + extra; i++) await putFreshCard(stranger)
    const stored = await countRange(store, DHT_RECORD_DATASTORE_PREFIX) - before
    // before: every one was stored. (The bucket refills DHT_VALUE_PUTS_PER_PEER_PER_HOUR an hour: a token at most
    // while this test runs.)
    expect(stored).toBeLessThanOrEqual(DHT_VALUE_PUTS_PER_PEER_BURST + 1)
    expect(valuePutStats(victim.host.services.dht)?.refused).toBeGreaterThanOrEqual(extra - 1)
    // the stranger's own card now: the replicas refuse it too, and its announcement says so
    await stranger.publishCard({ name: 'stranger', capabilities: [{ capability_id: 'cap:flood', version: '1.0.0' }] })
    await stranger.discovery.announce()
    expect(stranger.discovery.stats.cardPutsRefused).toBeGreaterThan(0)
    // the bucket is the stranger's alone
    const held = await countRange(store, DHT_RECORD_DATASTORE_PREFIX)
    expect(await putFreshCard(other)).toBe(true)
    expect(await countRange(store, DHT_RECORD_DATASTORE_PREFIX)).toBe(held + 1)
  }, 60_000)
})
