/**
 * The datastore view a replica's DHT writes through (src/card/record-guard.ts):
 * a card record never goes back to an older valid card; everything else is
 * written as it comes. The same writes between real nodes: card-dht.test.ts.
 */
import { Libp2pRecord } from '@libp2p/record'
import { MemoryDatastore } from 'datastore-core'
import { Key } from 'interface-datastore'
import { toString } from 'uint8arrays'
import { describe, expect, it } from 'vitest'
import { cardRecordKey, decodeCardRecord, encodeCardRecord, issueCard, type AgentCard } from '../src/card/card.ts'
import { keepNewestCards } from '../src/card/record-guard.ts'
import { DHT_RECORD_DATASTORE_PREFIX } from '../src/constants.ts'
import { componentLogger } from '../src/logger.ts'
import { codeOf, draft, expired, forged, newKey } from './card-fixtures.ts'

const log = componentLogger(undefined, 'test')

function dsKey (agentId: string): Key {
  return new Key(`${DHT_RECORD_DATASTORE_PREFIX}${toString(cardRecordKey(agentId), 'base32')}`)
}

function record (card: AgentCard | Record<string, unknown>, agentId: string): Uint8Array {
  return new Libp2pRecord(cardRecordKey(agentId), encodeCardRecord(card as AgentCard), new Date()).serialize()
}

async function heldSeq (store: MemoryDatastore, agentId: string): Promise<number> {
  return (decodeCardRecord(Libp2pRecord.deserialize(await store.get(dsKey(agentId))).value) as AgentCard).seq
}

describe('a replica keeps the newest card it can verify', () => {
  it('refuses an older valid card over a newer one, with a typed error naming both seqs', async () => {
    const key = await newKey()
    const newer = await issueCard(key, draft, 9)
    const store = new MemoryDatastore()
    const guarded = keepNewestCards(store, log)
    await guarded.put(dsKey(newer.agent_id), record(newer, newer.agent_id))
    const err = await codeOf(Promise.resolve(guarded.put(dsKey(newer.agent_id), record(await issueCard(key, draft, 3), newer.agent_id))))
    expect(err).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'stale_seq', held_seq: 9, offered_seq: 3 } })
    expect(await heldSeq(store, newer.agent_id)).toBe(9)
  })

  it('takes the same card again, a newer one, and any card over one that no longer verifies', async () => {
    const key = await newKey()
    const store = new MemoryDatastore()
    const guarded = keepNewestCards(store, log)
    const first = await issueCard(key, draft, 4)
    const id = first.agent_id
    await guarded.put(dsKey(id), record(first, id))
    await guarded.put(dsKey(id), record(first, id))
    await guarded.put(dsKey(id), record(await issueCard(key, draft, 5), id))
    expect(await heldSeq(store, id)).toBe(5)
    // an expired card held is no reason to refuse anything
    await store.put(dsKey(id), record(await expired(key, 50), id))
    await guarded.put(dsKey(id), record(await issueCard(key, draft, 2), id))
    expect(await heldSeq(store, id)).toBe(2)
  })

  it('leaves to the validator what is not a valid card, and writes other keys untouched', async () => {
    const key = await newKey()
    const store = new MemoryDatastore()
    const guarded = keepNewestCards(store, log)
    const held = await issueCard(key, draft, 8)
    await guarded.put(dsKey(held.agent_id), record(held, held.agent_id))
    // a forged higher seq is not a reason to refuse (the rpc handler's validator refuses it before this)
    await guarded.put(dsKey(held.agent_id), record(await forged(key, await newKey(), 100), held.agent_id))
    const other = new Key('/peers/something')
    await guarded.put(other, Uint8Array.from([1, 2, 3]))
    expect(await store.get(other)).toEqual(Uint8Array.from([1, 2, 3]))
    expect(await guarded.has(other)).toBe(true)
  })
})
