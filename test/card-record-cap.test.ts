/**
 * The bound on DHT card records a node stores for others (src/card/record-cap.ts).
 * kad-dht writes every PUT_VALUE that passes the validator: a stranger that
 * minted a key per card had any number of valid records stored, for good
 * (300 of 300 from one peer in 7 s, before). Past the bound a new key is
 * refused unless expired records can be swept; a record held can still be
 * replaced, and the node's own card is always stored.
 *
 * First the datastore view alone, then the same writes from a real stranger
 * node over kad-dht.
 */
import { Libp2pRecord } from '@libp2p/record'
import { MemoryDatastore } from 'datastore-core'
import { Key, type Datastore } from 'interface-datastore'
import { toString } from 'uint8arrays'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cardRecordKey, encodeCardRecord, issueCard, type AgentCard } from '../src/card/card.ts'
import { keepNewestCards } from '../src/card/record-guard.ts'
import { DHT_PUT_TIMEOUT_MS, DHT_RECORD_DATASTORE_PREFIX } from '../src/constants.ts'
import { componentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { countRange } from '../src/storage/range.ts'
import { codeOf, draft, expired, newKey } from './card-fixtures.ts'
import { startMesh, stopAll } from './helpers.ts'

const log = componentLogger(undefined, 'test')
const MAX = 3

function dsKey (agentId: string): Key {
  return new Key(`${DHT_RECORD_DATASTORE_PREFIX}${toString(cardRecordKey(agentId), 'base32')}`)
}

function record (card: AgentCard): Uint8Array {
  return new Libp2pRecord(cardRecordKey(card.agent_id), encodeCardRecord(card), new Date()).serialize()
}

async function strangerCard (seq = 1): Promise<AgentCard> {
  return issueCard(await newKey(), draft, seq)
}

describe('the datastore view bounds the card records held for others', () => {
  it('refuses a new key past the bound with a typed error, and counts it; a held record is still replaced', async () => {
    const store = new MemoryDatastore()
    const stats = { refused: 0, swept: 0 }
    const guarded = keepNewestCards(store, log, { stats, max: MAX })
    const cards = [await strangerCard(), await strangerCard(), await strangerCard()]
    for (const c of cards) await guarded.put(dsKey(c.agent_id), record(c))
    const extra = await strangerCard()
    const err = await codeOf(Promise.resolve(guarded.put(dsKey(extra.agent_id), record(extra))))
    expect(err).toMatchObject({ code: 'STORAGE_FULL', details: { reason: 'dht_records_full', max: MAX } })
    expect(stats.refused).toBe(1)
    expect(await store.has(dsKey(extra.agent_id))).toBe(false)
    // a newer card of an agent held takes its place: no room needed
    const key = await newKey()
    const held = await issueCard(key, draft, 1)
    await guarded.delete(dsKey(cards[0]!.agent_id))
    await guarded.put(dsKey(held.agent_id), record(held))
    await guarded.put(dsKey(held.agent_id), record(await issueCard(key, draft, 2)))
    expect(await countRange(store, DHT_RECORD_DATASTORE_PREFIX)).toBe(MAX)
  })

  it('makes room by sweeping expired records, and always stores the node\'s own card', async () => {
    const store = new MemoryDatastore()
    const stats = { refused: 0, swept: 0 }
    const ownKey = await newKey()
    const own = await issueCard(ownKey, draft, 1)
    const guarded = keepNewestCards(store, log, { stats, max: MAX, self: own.agent_id })
    // held before this view counted: two live cards and one expired
    const live = [await strangerCard(), await strangerCard()]
    for (const c of live) await store.put(dsKey(c.agent_id), record(c))
    const gone = await expired(await newKey())
    await store.put(dsKey(gone.agent_id), record(gone))
    const next = await strangerCard()
    await guarded.put(dsKey(next.agent_id), record(next))
    expect(stats.swept).toBe(1)
    expect(await store.has(dsKey(gone.agent_id))).toBe(false)
    expect(await store.has(dsKey(next.agent_id))).toBe(true)
    // full again, and the sweep has just run: a stranger's new key is refused, the node's own card is not
    const late = await strangerCard()
    await expect(guarded.put(dsKey(late.agent_id), record(late))).rejects.toMatchObject({ code: 'STORAGE_FULL' })
    await guarded.put(dsKey(own.agent_id), record(own))
    expect(await store.has(dsKey(own.agent_id))).toBe(true)
    for (const c of live) expect(await store.has(dsKey(c.agent_id))).toBe(true)
  })
})

describe('a stranger that mints a key per card, over kad-dht', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => {
    // only the replica is bounded: the stranger's own copy of each record is its business
    nodes = await startMesh(2, { nodeOptions: (i) => i === 1 ? { dht: { recordsMax: MAX } } : {} })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('has at most the bound stored at the replica, which counts what it refused', async () => {
    const [stranger, victim] = nodes as [MeshNode, MeshNode]
    const store = (victim as unknown as { datastore: Datastore }).datastore
    const before = await countRange(store, DHT_RECORD_DATASTORE_PREFIX)
    const sent = 3 * MAX
    for (let i = 0; i < sent; i++) {
      const card = await strangerCard()
      // each put goes to the replicas (here: the victim); one refused there fails the put, which the stranger ignores
      try {
        for await (const _ of stranger.host.services.dht.put(cardRecordKey(card.agent_id), encodeCardRecord(card), { signal: AbortSignal.timeout(DHT_PUT_TIMEOUT_MS) })) { /* events of the put */ }
      } catch (err) {
        expect(err).toBeInstanceOf(Error)
      }
    }
    const after = await countRange(store, DHT_RECORD_DATASTORE_PREFIX)
    // before: every one of them was stored
    expect(after).toBeLessThanOrEqual(Math.max(before, MAX))
    expect(victim.cardRecords.refused).toBeGreaterThan(0)
  })
})
