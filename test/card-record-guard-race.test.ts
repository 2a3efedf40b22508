/**
 * keepNewestCards checks the record held and then writes, with awaits in
 * between: puts of one key now run one after the other (record-guard.ts).
 * Before, a replayed older card whose put was in flight when the newer one
 * came was written after it and rolled the replica back.
 */
import { Libp2pRecord } from '@libp2p/record'
import { MemoryDatastore } from 'datastore-core'
import { Key } from 'interface-datastore'
import { describe, expect, it } from 'vitest'
import { cardRecordKey, encodeCardRecord, issueCard, type AgentCard } from '../src/card/card.ts'
import { keepNewestCards } from '../src/card/record-guard.ts'
import { DHT_RECORD_DATASTORE_PREFIX } from '../src/constants.ts'
import { silentLogger } from '../src/logger.ts'
import { draft, newKey } from './card-fixtures.ts'

const record = (c: AgentCard): Uint8Array => new Libp2pRecord(cardRecordKey(c.agent_id), encodeCardRecord(c), new Date()).serialize()
const seqIn = (raw: Uint8Array): number => (JSON.parse(new TextDecoder().decode(Libp2pRecord.deserialize(raw).value)) as { seq: number }).seq

describe('the record guard under concurrent puts of one key', () => {
  it('replays of seq 1 racing the put of seq 3 over a held seq 1 leave seq 3, and are refused after it', async () => {
    const key = await newKey()
    const c1 = await issueCard(key, draft, 1)
    const c3 = await issueCard(key, draft, 3)
    const inner = new MemoryDatastore()
    const guarded = keepNewestCards(inner, silentLogger())
    const dsKey = new Key(`${DHT_RECORD_DATASTORE_PREFIX}card-guard-race`)
    await guarded.put(dsKey, record(c1))
    const results = await Promise.allSettled([guarded.put(dsKey, record(c1)), guarded.put(dsKey, record(c3)), guarded.put(dsKey, record(c1))])
    expect(results.map(r => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected'])
    expect(seqIn(await inner.get(dsKey))).toBe(3)
  })

  it('puts of other keys do not wait for each other\'s checks to be refused', async () => {
    const [a, b] = await Promise.all([newKey(), newKey()])
    const inner = new MemoryDatastore()
    const guarded = keepNewestCards(inner, silentLogger())
    const ka = new Key(`${DHT_RECORD_DATASTORE_PREFIX}card-guard-a`)
    const kb = new Key(`${DHT_RECORD_DATASTORE_PREFIX}card-guard-b`)
    await Promise.all([guarded.put(ka, record(await issueCard(a, draft, 2))), guarded.put(kb, record(await issueCard(b, draft, 5)))])
    expect(seqIn(await inner.get(ka))).toBe(2)
    expect(seqIn(await inner.get(kb))).toBe(5)
  })
})
