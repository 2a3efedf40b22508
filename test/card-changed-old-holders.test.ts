/**
 * A card that says something new reaches every peer that took the agent's
 * record under a key, not only those the new walk finds closest
 * (src/card/announce.ts, ANNOUNCE_HOLDERS_KEPT). A holder keeps the record and
 * the card it pulled on it until the record expires; before, a walk that no
 * longer counted it among the k closest (a peer joined nearer the key; on a
 * busy machine, a request of the walk lost) sent it nothing, and it handed out
 * the older card until that card was due. Seen in the harness's CI at b9e2c53
 * as a flaky test/card-changed-draft-rewalk.test.ts. Real nodes over TCP on
 * 127.0.0.1, the announcements real.
 */
import { createHash } from 'node:crypto'
import type { PeerId } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityKey } from '../src/card/card.ts'
import { CARD_HELD_PULL_MIN_INTERVAL_MS, CARD_MAX_FRAME_BYTES, CARD_PROTOCOL } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { kadRoutingTable } from '../src/wire/kad-internals.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { startLoneNodes, startMesh, stopAll, until } from './helpers.ts'
import { heldSeqs, storedRecordHolders } from './fixtures/dht-records.ts'

const K = 3
const dht = { k: K, alpha: K, disjointPaths: 1 }
const sha256 = (b: Uint8Array): Buffer => createHash('sha256').update(b).digest()

/** kad-dht's XOR distance from `peer` to the key whose multihash bytes are `key`. */
function distance (key: Uint8Array, peer: PeerId): Buffer {
  const a = sha256(key)
  const b = sha256(peer.toMultihash().bytes)
  return Buffer.from(a.map((x, i) => x ^ (b[i] ?? 0)))
}

/** The `n` of `peers` closest to `key`. */
function closest (key: Uint8Array, peers: PeerId[], n: number): PeerId[] {
  return [...peers].sort((x, y) => Buffer.compare(distance(key, x), distance(key, y))).slice(0, n)
}

describe('a changed card and the peers that took the key\'s earlier records', () => {
  let nodes: MeshNode[] = []
  let late!: MeshNode
  beforeAll(async () => {
    nodes = await startMesh(5, { transport: 'tcp', nodeOptions: () => ({ dht }) })
    late = (await startLoneNodes(1, { dht }))[0]!
  })
  afterAll(async () => { await stopAll([...nodes, late]) })

  it('sends the new record to a holder a peer that joined nearer the key pushed out of the k closest: it hands out the new card', async () => {
    const agent = nodes[0]!
    const others = nodes.slice(1).map(n => peerIdOfAgent(n.agentId))
    const newcomer = peerIdOfAgent(late.agentId)
    // a capability whose key has the late node among the k closest of all: it takes the place of one of the others
    let capabilityId = ''
    for (let i = 0; capabilityId === ''; i++) {
      const id = `cap:moved-${i}`
      const key = (await capabilityKey(id)).multihash.bytes
      if (closest(key, [...others, newcomer], K).some(p => p.equals(newcomer))) capabilityId = id
    }
    const key = await capabilityKey(capabilityId)
    const v1 = await agent.discovery.publish({ name: 'moved', capabilities: [{ capability_id: capabilityId, version: '1.0.0' }] })
    expect(await agent.discovery.announce()).toBeGreaterThan(0)
    const holders = (await storedRecordHolders(nodes, agent, key)).map(n => peerIdOfAgent(n.agentId))
    // the late node joins: the key's k closest now leave out at least one peer that holds the agent's record
    for (const n of nodes) await late.join(n.addresses)
    await until(() => (kadRoutingTable(agent.host.services.dht)?.closestPeers(sha256(key.multihash.bytes), { count: 20 }) ?? []).some(p => p.equals(newcomer)),
      'the late node in the agent\'s routing table')
    const nowClosest = closest(key.multihash.bytes, [...others, newcomer], K)
    const pushedOut = holders.filter(h => !nowClosest.some(p => p.equals(h)))
    expect(pushedOut.length).toBeGreaterThan(0)

    const client = new RpcClient(agent.host, { protocol: CARD_PROTOCOL, maxFrameBytes: CARD_MAX_FRAME_BYTES })
    try {
      const handedOut = async (peers: PeerId[]): Promise<number[]> => heldSeqs(client, peers, peerIdOfAgent(agent.agentId))
      await until(async () => (await handedOut(holders)).every(seq => seq === v1.seq), 'the holders to hand out the first card')
      // as CARD_HELD_PULL_MIN_INTERVAL_MS later: the holders may pull the agent's card again
      for (const n of [...nodes, late]) {
        const pulledAt = (n.discovery as unknown as { held: { pulledAt: Map<string, number> } }).held.pulledAt
        pulledAt.set(agent.agentId, (pulledAt.get(agent.agentId) ?? Date.now()) - CARD_HELD_PULL_MIN_INTERVAL_MS)
      }
      const v2 = await agent.discovery.publish({ name: 'moved', capabilities: [{ capability_id: capabilityId, version: '2.0.0' }] })
      await agent.discovery.announce()
      // the new walk reached the late node ...
      await until(async () => (await handedOut([newcomer]))[0] === v2.seq, 'the late node to hand out the new card')
      // ... and the holder it pushed out got the record too (before: it handed out the first card until that was due)
      await until(async () => (await handedOut(pushedOut)).every(seq => seq === v2.seq), 'the pushed-out holders to hand out the new card')
    } finally {
      client.close()
    }
  }, 90_000)
})
