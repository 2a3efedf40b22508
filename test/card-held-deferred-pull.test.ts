/**
 * A provider record that comes within CARD_HELD_PULL_MIN_INTERVAL_MS of its
 * agent's last pull is pulled at the interval's end, not dropped
 * (src/card/held-cards.ts, protocols/card.md, holders). Before, the pull was
 * refused and nothing tried it later: an agent that published a new card
 * soon after its last one (`aap-mesh card set` soon after its start, two
 * card sets in a row) walked its keys for it, and the holders there kept
 * handing out the older card until it was due (CARD_REPUBLISH_INTERVAL_MS,
 * 20 min). Found by session 59's review. The interval is the holders' own,
 * shortened for the test (HeldCards' pullMinIntervalMs); the announcements
 * and pulls are real, over TCP on 127.0.0.1.
 */
import { peerIdFromString } from '@libp2p/peer-id'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityKey, issueCard, type AgentCard } from '../src/card/card.ts'
import { newDiscoveryStats } from '../src/card/discovery-stats.ts'
import { HeldCards, type HeldCardsInit } from '../src/card/held-cards.ts'
import { CARD_HELD_MAX, CARD_HELD_PULL_MIN_INTERVAL_MS, CARD_MAX_FRAME_BYTES, CARD_PROTOCOL } from '../src/constants.ts'
import { agentIdOf, peerIdOfAgent } from '../src/identity/identity.ts'
import { componentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { RpcClient } from '../src/wire/rpc.ts'
import { draft, newKey } from './card-fixtures.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { heldSeqs, storedRecordHolders } from './fixtures/dht-records.ts'

const K = 3
const NODES = 6
/** The holders' interval in this test: the new card must reach them at its end, well within `until`'s bound. */
const TEST_PULL_INTERVAL_MS = 2_000
const V1 = { capability_id: 'cap:deferred', version: '1.0.0' }
const V2 = { capability_id: 'cap:deferred', version: '2.0.0' }

type Internals = { held: { stop: () => void, init: HeldCardsInit, pulledAt: Map<string, number> } }
const heldOf = (n: MeshNode): Internals['held'] => (n.discovery as unknown as Internals).held

describe('a provider record within the interval of its agent\'s last pull', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => {
    nodes = await startMesh(NODES, { transport: 'tcp', nodeOptions: () => ({ dht: { k: K, alpha: K, disjointPaths: 1 } }) })
    // each node's held cards as the node made them, with the test's interval
    for (const n of nodes) {
      const old = heldOf(n)
      old.stop()
      ;(n.discovery as unknown as { held: HeldCards }).held = new HeldCards({ ...old.init, pullMinIntervalMs: TEST_PULL_INTERVAL_MS })
    }
  })
  afterAll(async () => { await stopAll(nodes) })

  it('is pulled when the interval ends: the holders hand out the new card', async () => {
    const agent = nodes[0] as MeshNode
    const key = await capabilityKey(V1.capability_id)
    const v1 = await agent.discovery.publish({ name: 'deferred', capabilities: [V1] })
    expect(await agent.discovery.announce()).toBeGreaterThan(0)
    const holders = await storedRecordHolders(nodes, agent, key)
    const client = new RpcClient(agent.host, { protocol: CARD_PROTOCOL, maxFrameBytes: CARD_MAX_FRAME_BYTES })
    try {
      const handedOut = async (): Promise<number[]> => heldSeqs(client, holders.map(h => peerIdOfAgent(h.agentId)), peerIdOfAgent(agent.agentId))
      await until(async () => (await handedOut()).every(seq => seq === v1.seq), 'the holders to hand out the first card')
      // the holders pulled it moments ago: pin their last pull to now, so the new card's records come within the interval
      for (const h of holders) heldOf(h).pulledAt.set(agent.agentId, Date.now())
      const walks = agent.discovery.stats.providerWalks
      const v2 = await agent.discovery.publish({ name: 'deferred', capabilities: [V2] })
      await agent.discovery.announce()
      expect(agent.discovery.stats.providerWalks).toBeGreaterThan(walks)
      // before: the pull after the new records was refused and never made; the holders handed out v1 for 20 min
      await until(async () => (await handedOut()).every(seq => seq === v2.seq), 'the holders to hand out the new card')
    } finally {
      client.close()
    }
  }, 90_000)
})

describe('HeldCards: pulls put off to the end of the interval', () => {
  const log = componentLogger(undefined, 'test')
  const setUp = (): { held: HeldCards, pulls: string[], clock: { now: number }, waits: Array<{ fn: () => void, ms: number, cancelled: boolean }> } => {
    const pulls: string[] = []
    const clock = { now: Date.now() }
    const waits: Array<{ fn: () => void, ms: number, cancelled: boolean }> = []
    const held = new HeldCards({
      // a pull that never ends: the test sees what was asked for, nothing more
      pull: async (peer) => { pulls.push(peer.toString()); return new Promise<AgentCard>(() => {}) },
      connected: () => true,
      stats: newDiscoveryStats(),
      log,
      now: () => clock.now,
      schedule: (fn, ms) => { const w = { fn, ms, cancelled: false }; waits.push(w); return () => { w.cancelled = true } }
    })
    return { held, pulls, clock, waits }
  }

  it('keeps one per agent, made at the interval\'s end, and cancels a waiting one on stop', async () => {
    const { held, pulls, clock, waits } = setUp()
    const peer = peerIdFromString(agentIdOf(await newKey()))
    held.onProviderRecord(peer)
    expect(pulls).toEqual([peer.toString()])
    clock.now += 1_000
    held.onProviderRecord(peer)
    held.onProviderRecord(peer)
    expect(waits.map(w => w.ms)).toEqual([CARD_HELD_PULL_MIN_INTERVAL_MS - 1_000])
    clock.now += CARD_HELD_PULL_MIN_INTERVAL_MS - 1_000
    waits[0]!.fn()
    expect(pulls).toEqual([peer.toString(), peer.toString()])
    // within the new interval again: put off once more, and cancelled when the node stops
    held.onProviderRecord(peer)
    expect(waits.length).toBe(2)
    held.stop()
    expect(waits[1]!.cancelled).toBe(true)
  })

  it('drops the put-off pull of an agent whose card is dropped past CARD_HELD_MAX', async () => {
    const { held, clock, waits } = setUp()
    const first = await issueCard(await newKey(), draft, 1, clock.now)
    const peer = peerIdFromString(first.agent_id)
    held.onProviderRecord(peer)
    held.hold(first)
    held.onProviderRecord(peer)
    expect(waits.length).toBe(1)
    const other = await issueCard(await newKey(), draft, 1, clock.now)
    // CARD_HELD_MAX other agents' cards push the first one out
    for (let i = 0; i < CARD_HELD_MAX; i++) held.hold({ ...other, agent_id: `filler-${i}` })
    expect(held.size).toBe(CARD_HELD_MAX)
    expect(waits[0]!.cancelled).toBe(true)
  })
})
