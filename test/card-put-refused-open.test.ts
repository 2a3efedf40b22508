/**
 * An announcement counts a replica that did not take the card record
 * (DiscoveryStats.cardPutsRefused, src/card/announce.ts) also when the
 * record's stream to it could not be opened. kad-dht puts a record at the
 * closest peers that answered its walk, and yields DIAL_PEER before it opens
 * the stream and SEND_QUERY after, so such a replica fails with no
 * PUT_VALUE sent; it was counted only after one was. Real loopback hosts: the
 * only DHT peer of A answers the walk of A's card record, then stops serving
 * the DHT.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cardRecordKey } from '../src/card/card.ts'
import { DHT_PROTOCOL } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { closerOnly, serveDht } from './fixtures/dht-wire.ts'
import { startLoopbackHost, startMesh, stopAll, until } from './helpers.ts'

/** kad-dht's message type of a walk step (FIND_NODE, its GET_CLOSER_PEERS). */
const FIND_NODE = 4

describe('a replica whose stream for the card record cannot be opened', () => {
  let nodes: MeshNode[]
  let A: MeshNode
  let replica: MeshHost
  let answered = 0

  beforeAll(async () => {
    nodes = await startMesh(1, { transport: 'tcp' })
    A = nodes[0] as MeshNode
    replica = await startLoopbackHost()
    // it answers every request naming nobody closer; once it answered the walk to A's card record, it no longer
    // serves the DHT
    const recordKey = Buffer.from(cardRecordKey(A.agentId))
    await serveDht(replica, (type, request, stream) => {
      if (type === FIND_NODE && Buffer.from(request).includes(recordKey)) {
        answered++
        // the stream open already is answered; new ones are refused
        replica.unhandle(DHT_PROTOCOL).catch((err: unknown) => { stream.abort(err as Error) })
      }
      return closerOnly(type, [])
    })
    await A.join(replica.getMultiaddrs().map(a => a.toString()))
    await until(async () => (await A.host.peerStore.get(replica.peerId)).tags.has('kad-peer'), 'the replica in A\'s routing table')
  }, 60_000)

  afterAll(async () => {
    await replica?.stop()
    await stopAll(nodes)
  })

  it('is counted as a replica that did not take it', async () => {
    const before = A.discovery.stats.cardPutsRefused
    await A.publishCard({ name: 'a', capabilities: [{ capability_id: 'cap:put-refused-open', version: '1.0.0' }] })
    await until(() => A.discovery.stats.cardPutsRefused > before, 'the refusal counted')
    // the replica answered the walk to the record once and was never sent the record
    expect(answered).toBe(1)
    expect(A.discovery.stats.cardPutsRefused - before).toBe(1)
  })
})
