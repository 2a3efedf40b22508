/**
 * A node re-signs its card before it expires; storing the re-signed card can
 * fail (a full disk). The card is served all the same (discovery.ts publish,
 * `unstored`): before, the re-sign failed as a whole and get_card kept
 * serving the old card after it expired, which every peer refuses. Its seq,
 * never below the clock, still outranks the stored older card after a restart.
 */
import { MemoryDatastore } from 'datastore-core'
import { Key } from 'interface-datastore'
import { afterAll, describe, expect, it } from 'vitest'
import { issueCard } from '../src/card/card.ts'
import { CARD_TTL_MS } from '../src/constants.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { FaultyDatastore } from './fixtures/faulty-datastore.ts'
import { draft, newKey } from './card-fixtures.ts'
import { rejectsWith, stopAll } from './helpers.ts'

const SELF_CARD_KEY = '/aap/self/card'

describe('the own card while the datastore refuses to store it', () => {
  const nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  it('a re-signed card is served valid after the last stored one expired; a new draft still fails its publish', async () => {
    const key = await newKey()
    const faulty = new FaultyDatastore(new MemoryDatastore())
    // the card it signed and stored over an hour ago
    const old = await issueCard(key, draft, 7, Date.now() - CARD_TTL_MS - 60_000)
    await faulty.inner.put(new Key(SELF_CARD_KEY), new TextEncoder().encode(JSON.stringify(old)))
    faulty.only = k => k === SELF_CARD_KEY
    faulty.failing = true
    const x = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, privateKey: key, datastore: faulty.store, logger: silentLogger() })
    await x.start(); nodes.push(x)
    const d = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() })
    await d.start(); nodes.push(d)
    expect(await d.join(x.addresses)).toBe(1)
    const got = await d.getCard(x.agentId, { fresh: true })
    expect(got.seq).toBeGreaterThan(old.seq)
    expect(Date.parse(got.expires_at)).toBeGreaterThan(Date.now())
    expect(faulty.refused).toBeGreaterThan(0)
    // never stored: the datastore still holds the old card
    expect(JSON.parse(new TextDecoder().decode(await faulty.inner.get(new Key(SELF_CARD_KEY))))).toEqual(old)
    // a new draft is the caller's to retry: its publish fails and the card served stays
    await rejectsWith(x.publishCard({ ...draft, name: 'renamed' }), 'STORAGE_FULL')
    expect(x.card).toEqual(got)
  })
})
