/**
 * Bad card records on the DHT: real nodes put them under /aap-card/<agentId>
 * with the DHT's own `put`, and the other nodes' validators and selector have
 * to keep them out of every lookup.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { PeerId, PrivateKey, Stream } from '@libp2p/interface'
import type { ValidateFn } from '@libp2p/kad-dht'
import { MemoryDatastore } from 'datastore-core'
import { Libp2pRecord } from '@libp2p/record'
import { Key } from 'interface-datastore'
import { equals, toString } from 'uint8arrays'
import { CARD_DHT_NAMESPACE, DHT_GET_TIMEOUT_MS, DHT_PROTOCOL, DHT_PUT_TIMEOUT_MS, DHT_RECORD_DATASTORE_PREFIX } from '../src/constants.ts'
import { cardRecordKey, decodeCardRecord, encodeCardRecord, issueCard, selectCardRecord } from '../src/card/card.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { createHost, dialAddrs, type MeshHost } from '../src/wire/host.ts'
import { codeOf, draft, expired, forged, mutated, newKey, oversized, unsigned } from './card-fixtures.ts'
import { startMesh, stopAll, until, waitForRouting } from './helpers.ts'

const enc = new TextEncoder()
let memCounter = 0

/** The seq of the card record `store` holds for `agent` as a DHT replica, if any. */
async function heldSeq (store: MemoryDatastore, agent: string): Promise<number | undefined> {
  const key = new Key(`${DHT_RECORD_DATASTORE_PREFIX}${toString(cardRecordKey(agent), 'base32')}`)
  if (!await store.has(key)) return undefined
  return (decodeCardRecord(Libp2pRecord.deserialize(await store.get(key)).value) as { seq: number }).seq
}

/** Put a record with the DHT's own put; count the replicas that stored it and those that refused it. */
async function put (host: MeshHost, key: Uint8Array, value: Uint8Array): Promise<{ acks: number, refusals: number }> {
  let acks = 0
  let refusals = 0
  for await (const ev of host.services.dht.put(key, value, { signal: AbortSignal.timeout(DHT_PUT_TIMEOUT_MS) })) {
    if (ev.name === 'PEER_RESPONSE' && ev.messageName === 'PUT_VALUE') acks++
    if (ev.name === 'QUERY_ERROR') refusals++
  }
  return { acks, refusals }
}

/**
 * A plain libp2p host of the mesh's DHT whose card validator is `validate`:
 * a node that stores whatever it likes and answers GET_VALUE with it.
 */
async function rogueHost (validate: ValidateFn): Promise<MeshHost> {
  const host = await createHost({
    privateKey: await newKey(),
    datastore: new MemoryDatastore(),
    listen: [`/memory/aap-card-dht-rogue-${process.pid}-${memCounter++}`],
    localMesh: true,
    dhtValidators: { [CARD_DHT_NAMESPACE]: validate },
    dhtSelectors: { [CARD_DHT_NAMESPACE]: () => 0 }
  })
  await host.start()
  return host
}

/** Connect `host` to every node and wait until each of them knows it speaks the DHT. */
async function joinAll (host: MeshHost, nodes: MeshNode[]): Promise<void> {
  const joined = await dialAddrs(host, nodes.flatMap(n => n.addresses))
  expect(joined.length).toBe(nodes.length)
  await Promise.all(nodes.map(async n => {
    // the node has no record of the host until the connection's identify has run (NotFoundError until then)
    const known = async (): Promise<string[]> => n.host.peerStore.get(host.peerId).then(p => p.protocols, (err: Error) => {
      if (err.name === 'NotFoundError') return []
      throw err
    })
    await until(async () => (await known()).includes(DHT_PROTOCOL), `node knows ${host.peerId.toString()} speaks the DHT`)
  }))
}

describe('card records on the DHT', () => {
  let nodes: MeshNode[] = []
  const rogues: MeshHost[] = []
  /** An agent that is never online: its card can only come from the DHT. */
  let agent: PrivateKey
  let agentId: string

  /** The datastores under the nodes, to see which card each replica holds. */
  const stores = Array.from({ length: 5 }, () => new MemoryDatastore())
  const lateStore = new MemoryDatastore()
  const heldSeqs = async (agent: string): Promise<Array<number | undefined>> => Promise.all(stores.map(async s => heldSeq(s, agent)))

  beforeAll(async () => {
    nodes = await startMesh(5, { nodeOptions: i => ({ datastore: stores[i]! }) })
    agent = await newKey()
    agentId = agentIdOf(agent)
  })
  afterAll(async () => {
    await Promise.all(rogues.map(async h => h.stop()))
    await stopAll(nodes)
  })

  it('honest replicas refuse malformed, oversized, unsigned, forged, mutated, expired and misfiled records, so getCard fails with AGENT_NOT_FOUND', async () => {
    const writer = nodes[0]!
    const reader = nodes[3]!
    const someoneElse = await issueCard(await newKey(), draft, 1)
    const bad: Array<[string, Uint8Array]> = [
      ['malformed', enc.encode('{"agent_id": ')],
      ['oversized', encodeCardRecord(await oversized(agent))],
      ['unsigned', enc.encode(JSON.stringify(await unsigned(agent)))],
      ['forged', encodeCardRecord(await forged(agent, await newKey(), 1_000))],
      ['mutated', encodeCardRecord(await mutated(agent))],
      ['expired', encodeCardRecord(await expired(agent, 1_000))],
      ['another agent\'s card', encodeCardRecord(someoneElse)]
    ]
    for (const [what, value] of bad) {
      const { acks, refusals } = await put(writer.host, cardRecordKey(agentId), value)
      expect(acks, what).toBe(0)
      expect(refusals, what).toBeGreaterThan(0)
    }
    const { code, details } = await codeOf(reader.discovery.getCard(agentId, { fresh: true }))
    expect(code).toBe('AGENT_NOT_FOUND')
    expect(details).toMatchObject({ agent_id: agentId, dht_error: 'AGENT_NOT_FOUND' })
    // the node that wrote the bad records does not believe them either
    expect((await codeOf(writer.discovery.getCard(agentId, { fresh: true }))).code).toBe('AGENT_NOT_FOUND')

    // the same key with a valid record lands, and every node can read it
    const good = await issueCard(agent, draft, 3)
    expect((await put(writer.host, cardRecordKey(agentId), encodeCardRecord(good))).acks).toBeGreaterThan(0)
    expect(await reader.discovery.getCard(agentId, { fresh: true })).toEqual(good)
  })

  it('the newest valid card wins over a replica serving an older one that refuses corrections and one serving a forged higher seq', async () => {
    const reader = nodes[4]!
    const older = encodeCardRecord(await issueCard(agent, draft, 4))
    const newest = await issueCard(agent, draft, 5)
    const fake = encodeCardRecord(await forged(agent, await newKey(), 1_000_000))
    // A replica that stores the older card and refuses every other record, so it
    // never takes the correction a reader sends it; and one that stores anything.
    const stale = await rogueHost(async (_key, value) => { if (!equals(value, older)) throw new Error('this replica keeps what it has') })
    const forger = await rogueHost(async () => {})
    rogues.push(stale, forger)
    await joinAll(stale, nodes)
    await joinAll(forger, nodes)

    expect((await put(nodes[1]!.host, cardRecordKey(agentId), older)).acks).toBeGreaterThan(0)
    expect((await put(nodes[1]!.host, cardRecordKey(agentId), encodeCardRecord(newest))).acks).toBeGreaterThan(0)
    // only the forger takes the forged card (and the writer, which stores its own put unchecked)
    expect((await put(nodes[0]!.host, cardRecordKey(agentId), fake)).acks).toBe(1)

    expect(await reader.discovery.getCard(agentId, { fresh: true })).toEqual(newest)
    // the selector every node runs makes the same choice among what the replicas hold
    expect(await selectCardRecord(cardRecordKey(agentId), [older, encodeCardRecord(newest), fake])).toBe(1)
  })

  it('a replica refuses an older valid card replayed over the newer one it holds, and a lookup returns the newest', async () => {
    const reader = nodes[4]!
    const other = await newKey()
    const otherId = agentIdOf(other)
    const current = await issueCard(other, draft, 9)
    // put until every node holds it (a put reaches the replicas its lookup found, which under load may be fewer)
    await until(async () => {
      if ((await heldSeqs(otherId)).every(seq => seq === 9)) return true
      expect((await put(nodes[1]!.host, cardRecordKey(otherId), encodeCardRecord(current))).acks).toBeGreaterThan(0)
      return false
    }, 'every replica holding seq 9')
    expect(await reader.discovery.getCard(otherId, { fresh: true })).toEqual(current)
    // anyone can replay an old, validly signed card: the writer's own store and every replica refuse it
    const replay = await issueCard(other, { ...draft, description: 'older text' }, 2)
    expect((await codeOf(put(nodes[2]!.host, cardRecordKey(otherId), encodeCardRecord(replay)))).details).toMatchObject({ reason: 'stale_seq', held_seq: 9, offered_seq: 2 })
    // a writer that holds nothing stores it itself, but no replica takes it from there
    const late = await createMeshNode({ listen: [`/memory/aap-card-dht-late-${process.pid}-${memCounter++}`], localMesh: true, datastore: lateStore })
    await late.start()
    expect(await late.join(nodes[0]!.addresses)).toBe(1)
    await waitForRouting([late])
    const { acks, refusals } = await put(late.host, cardRecordKey(otherId), encodeCardRecord(replay))
    // at most the forger of the test before, which stores anything, takes it; every honest replica it reached refused
    expect(acks).toBeLessThanOrEqual(1)
    expect(refusals).toBeGreaterThan(0)
    expect(await heldSeqs(otherId)).toEqual([9, 9, 9, 9, 9])
    expect(await heldSeq(lateStore, otherId)).toBe(2)
    // the replica that never saw the newer card (the late node) is corrected by a lookup, and takes it
    try {
      expect(await reader.discovery.getCard(otherId, { fresh: true })).toEqual(current)
      expect(await late.discovery.getCard(otherId, { fresh: true })).toEqual(current)
      // the correction goes out at the walk's end, which may come after the answer (CARD_DHT_SETTLE_MS)
      await until(async () => await heldSeq(lateStore, otherId) === 9, 'the late replica to take the correction')
    } finally {
      await late.stop()
    }
  })
  it('a replica that takes the lookup and never answers does not hold the answer, and the walk still ends within its bound', async () => {
    const reader = nodes[3]!
    const key = await newKey()
    const id = agentIdOf(key)
    const card = await issueCard(key, draft, 3)
    expect((await put(nodes[1]!.host, cardRecordKey(id), encodeCardRecord(card))).acks).toBeGreaterThan(0)
    // a DHT host that takes every request and never answers; without the settle, it would hold the answer for DHT_GET_TIMEOUT_MS
    const dropper = await rogueHost(async () => {})
    rogues.push(dropper)
    const held: Stream[] = []
    await dropper.unhandle(DHT_PROTOCOL)
    await dropper.handle(DHT_PROTOCOL, (stream: Stream) => { held.push(stream) }, { maxInboundStreams: 100 })
    await joinAll(dropper, [reader])
    const table = Reflect.get(reader.host.services.dht, 'routingTable') as { find: (p: PeerId) => Promise<PeerId | undefined> }
    await until(async () => await table.find(dropper.peerId) !== undefined, 'the reader to hold the dropper as a DHT contact')
    try {
      const before = { ...reader.discovery.stats }
      expect(await reader.discovery.getCard(id, { fresh: true })).toEqual(card)
      // the walk asks the dropper too (before the answer, or, when it ranks late among the contacts, after it)
      await until(() => held.length > 0, 'the dropper asked')
      expect(reader.discovery.stats.dhtSettled - before.dhtSettled).toBe(1)
      // the walk went on after the answer (kad-dht corrects stale replicas at its end) until its own bound cut it
      await until(() => reader.discovery.stats.dhtWalksEndedBadly > before.dhtWalksEndedBadly, 'the walk to end at DHT_GET_TIMEOUT_MS', DHT_GET_TIMEOUT_MS * 3)
    } finally {
      for (const s of held) s.abort(new Error('test over'))
    }
  })
})
