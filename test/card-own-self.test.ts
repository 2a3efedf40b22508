/**
 * This node's own card as discovery hands it out (src/card/discovery.ts):
 * - `includeSelf` with an invalid (empty) query is INVALID_REQUEST. Before,
 *   the own card, which an empty query matches, was yielded first, and with
 *   `limit: 1` the stream ended before the query was checked.
 * - after a restart from a stored card that expired while the node was down
 *   (a library node started without `card`), the card handed out (knownCard,
 *   the `to_card` of a handoff; `includeSelf`) is valid now. Before, the
 *   stored card was loaded as it was and re-signed only by the republish
 *   timer or get_card, so a remote executor refused it as `expired`.
 */
import { MemoryDatastore } from 'datastore-core'
import { Key } from 'interface-datastore'
import { afterAll, describe, expect, it } from 'vitest'
import { issueCard, verifyCard } from '../src/card/card.ts'
import { CARD_TTL_MS } from '../src/constants.ts'
import { silentLogger } from '../src/logger.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { draft, newKey } from './card-fixtures.ts'
import { rejectsWith, stopAll } from './helpers.ts'

const SELF_CARD_KEY = '/aap/self/card'
const listen = ['/ip4/127.0.0.1/tcp/0']
const query = { capability: { capability_id: 'cap:translate', version: '1.0.0' } }

describe('the own card in discovery', () => {
  const nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  it('includeSelf with an empty query is INVALID_REQUEST, not the own card', async () => {
    const node = await createMeshNode({ listen, localMesh: true, logger: silentLogger() })
    await node.start(); nodes.push(node)
    await node.publishCard(draft)
    await rejectsWith(node.discovery.discover({}, { includeSelf: true, limit: 1 }), 'INVALID_REQUEST')
    // a valid query still yields it
    expect((await node.discovery.discover(query, { includeSelf: true, limit: 1 })).map(c => c.agent_id)).toEqual([node.agentId])
  })

  it('after a restart from a stored card that expired meanwhile, the card handed out is valid now', async () => {
    const key = await newKey()
    const datastore = new MemoryDatastore()
    // the card it signed and stored over an hour ago, before it went down
    const old = await issueCard(key, draft, 7, Date.now() - CARD_TTL_MS - 60_000)
    await datastore.put(new Key(SELF_CARD_KEY), new TextEncoder().encode(JSON.stringify(old)))
    const node = await createMeshNode({ listen, localMesh: true, privateKey: key, datastore, logger: silentLogger() })
    await node.start(); nodes.push(node)
    // what a handoff sends as the receiver's card, checked as a remote executor checks it
    const known = node.discovery.knownCard(node.agentId)
    expect(known?.seq).toBeGreaterThan(old.seq)
    await expect(verifyCard(known, { expectAgent: node.agentId })).resolves.toEqual(known)
    const [self] = await node.discovery.discover(query, { includeSelf: true, limit: 1 })
    expect(self?.seq).toBeGreaterThan(old.seq)
    await expect(verifyCard(self, { expectAgent: node.agentId })).resolves.toEqual(self)
  })
})
