/**
 * Issue #17 (a flat cost per node): the peer store's bound
 * (src/wire/peer-store-bound.ts). libp2p writes a record for every peer that
 * connects and ages one out only when it reads it six hours later, so
 * strangers that connect once each leave a record each. Real loopback hosts:
 * strangers connect and leave; a pass of the bound keeps the connected and
 * tagged peers and the most recently dialed ones, and deletes the rest past
 * the bound.
 */
import { randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PeerId } from '@libp2p/interface'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { MemoryDatastore } from 'datastore-core'
import { afterEach, describe, expect, it } from 'vitest'
import { createMeshNode } from '../src/node.ts'
import { createHost, type MeshHost } from '../src/wire/host.ts'
import { PEER_STORE_PEERS_MAX, PEER_STORE_PRUNE_INTERVAL_MS } from '../src/wire/network-constants.ts'
import { silentLogger } from '../src/logger.ts'
import { freePort, startLoopbackHost, until } from './helpers.ts'
import { closerOnly, serveDht, type PeerInfo } from './fixtures/dht-wire.ts'
import { FaultyDatastore } from './fixtures/faulty-datastore.ts'

const hosts: MeshHost[] = []
afterEach(async () => { await Promise.all(hosts.splice(0).map(async h => h.stop())) })

async function boundedHost (maxPeers: number, intervalMs = PEER_STORE_PRUNE_INTERVAL_MS): Promise<MeshHost> {
  const h = await createHost({ privateKey: await generateKeyPair('Ed25519'), datastore: new MemoryDatastore(), listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, peerStore: { maxPeers, intervalMs } })
  await h.start()
  hosts.push(h)
  return h
}

/** A stranger that does not serve the DHT (so no routing table keeps it), started. */
async function stranger (): Promise<MeshHost> {
  const s = await startLoopbackHost(undefined, { clientMode: true })
  hosts.push(s)
  return s
}

/** `s` connects to `a` (or `a` dials `s`), `a` records it, and `s` leaves; resolves once `a` saw the connection close. */
async function meetAndLeave (a: MeshHost, s: MeshHost, aDials = false): Promise<void> {
  if (aDials) await a.dial(s.getMultiaddrs())
  else await s.dial(a.getMultiaddrs())
  await until(async () => a.peerStore.has(s.peerId), 'the record of the peer that connected')
  if (aDials) await until(async () => (await a.peerStore.get(s.peerId)).metadata.has('last-dial-success'), 'the successful dial recorded')
  await s.stop()
  await until(() => a.getConnections(s.peerId).length === 0, 'the connection closed on both sides')
}

async function held (a: MeshHost): Promise<string[]> {
  return (await a.peerStore.all()).map(p => p.id.toString()).sort()
}

const ids = (peers: PeerId[]): string[] => peers.map(p => p.toString()).sort()

describe('the peer-store bound', () => {
  it('deletes, past the bound, the records of peers neither connected nor tagged: never dialed first, then the longest since their dial', async () => {
    const a = await boundedHost(4)
    const friend = await stranger()
    await friend.dial(a.getMultiaddrs())
    // met first: an order of insertion would delete them first
    const dialed: PeerId[] = []
    for (let i = 0; i < 3; i++) {
      const s = await stranger()
      dialed.push(s.peerId)
      const before = Date.now()
      await meetAndLeave(a, s, true)
      // the dial times differ, so their order is the one of this loop
      await until(() => Date.now() > before, 'the clock moved on')
    }
    const tagged = await stranger()
    await meetAndLeave(a, tagged)
    await a.peerStore.merge(tagged.peerId, { tags: { 'kept-by-a-test': { value: 10 } } })
    const inboundOnly: PeerId[] = []
    for (let i = 0; i < 5; i++) {
      const s = await stranger()
      inboundOnly.push(s.peerId)
      await meetAndLeave(a, s)
    }
    // libp2p keeps a record for each peer that ever connected: ten, all but one gone
    expect(await held(a)).toEqual(ids([friend.peerId, tagged.peerId, ...inboundOnly, ...dialed]))

    await a.services.peerStoreBound.pass()

    // the connected friend and the tagged peer stay, and the two dialed last fill the bound
    expect(await held(a)).toEqual(ids([friend.peerId, tagged.peerId, dialed[1] as PeerId, dialed[2] as PeerId]))
    expect(a.services.peerStoreBound.stats).toEqual({ records: 10, pruned: 6, passes: 1, failures: 0, heldBack: 0 })
    // the connection to the friend is untouched
    expect(a.getConnections(friend.peerId).length).toBeGreaterThan(0)
  })

  it('keeps every connected or tagged peer even over the bound, and a pass under the bound deletes nothing', async () => {
    const a = await boundedHost(1)
    const friends = [await stranger(), await stranger()]
    for (const f of friends) await f.dial(a.getMultiaddrs())
    await until(async () => (await held(a)).length === 2, 'both friends recorded')
    await a.services.peerStoreBound.pass()
    expect(await held(a)).toEqual(ids(friends.map(f => f.peerId)))
    expect(a.services.peerStoreBound.stats).toMatchObject({ records: 2, pruned: 0, failures: 0 })

    const roomy = await boundedHost(8)
    await meetAndLeave(roomy, await stranger())
    await roomy.services.peerStoreBound.pass()
    expect((await held(roomy)).length).toBe(1)
    expect(roomy.services.peerStoreBound.stats).toMatchObject({ records: 1, pruned: 0 })
  })

  it('bounds the records that a DHT answer naming peers which do not exist leaves behind', async () => {
    const a = await boundedHost(4)
    const port = await freePort()
    const named: PeerInfo[] = []
    for (let i = 0; i < 30; i++) named.push({ id: peerIdFromPrivateKey(await generateKeyPair('Ed25519')), addrs: [multiaddr(`/ip4/127.0.0.1/tcp/${port}`).bytes] })
    const liar = await startLoopbackHost()
    hosts.push(liar)
    // its DHT answers every request with the thirty as the closer peers, and nothing else
    await serveDht(liar, (type) => closerOnly(type, named))
    await a.dial(liar.getMultiaddrs())
    await until(async () => (await a.peerStore.get(liar.peerId)).tags.has('kad-peer'), 'the liar in the routing table')
    // a lookup asks the liar, which names thirty peers that do not exist; each gets a record without a connection
    try {
      for await (const ev of a.services.dht.getClosestPeers(randomBytes(32), { signal: AbortSignal.timeout(10_000) })) void ev
    } catch (err) {
      // the walk may end on the refused dials or its time; what it left in the peer store is what is judged
      expect(err).toBeInstanceOf(Error)
    }
    await until(async () => (await held(a)).length === 31, 'a record for each peer the liar named')

    await a.services.peerStoreBound.pass()

    const left = await held(a)
    expect(left).toHaveLength(4)
    expect(left).toContain(liar.peerId.toString())
    expect(a.services.peerStoreBound.stats).toMatchObject({ records: 31, pruned: 27, failures: 0 })
  })

  it('runs by itself every interval, and calls made while a pass runs share it', async () => {
    const a = await boundedHost(1, 50)
    for (let i = 0; i < 3; i++) await meetAndLeave(a, await stranger())
    await until(async () => a.services.peerStoreBound.stats.pruned >= 2 && (await held(a)).length <= 1, 'a pass of the timer')
    expect(a.services.peerStoreBound.stats.failures).toBe(0)

    const b = await boundedHost(1)
    await Promise.all([b.services.peerStoreBound.pass(), b.services.peerStoreBound.pass()])
    expect(b.services.peerStoreBound.stats.passes).toBe(1)
  })

  it('counts the records of a node\'s own datastores, in memory and on disk (LevelDB), its own left out', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-peer-store-bound-'))
    const onDisk = await createMeshNode({ dataDir: dir, listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() })
    const inMemory = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() })
    try {
      await onDisk.start()
      await inMemory.start()
      await inMemory.join(onDisk.addresses)
      await until(async () => (await onDisk.host.peerStore.has(inMemory.host.peerId)) && inMemory.host.peerStore.has(onDisk.host.peerId), 'each recorded by the other')
      for (const n of [onDisk, inMemory]) {
        await n.host.services.peerStoreBound.pass()
        expect(n.host.services.peerStoreBound.stats).toEqual({ records: 1, pruned: 0, passes: 1, failures: 0, heldBack: 0 })
      }
    } finally {
      await inMemory.stop()
      await onDisk.stop()
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('deletes nothing while the node\'s disk refuses writes (a delete would only take room in memory), and catches up once it takes them', async () => {
    const faulty = new FaultyDatastore(new MemoryDatastore())
    const node = await createMeshNode({ datastore: faulty.store, listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() })
    try {
      await node.start()
      const store = node.host.peerStore
      const over = 8
      for (let i = 0; i < PEER_STORE_PEERS_MAX + over; i++) {
        await store.merge(peerIdFromPrivateKey(await generateKeyPair('Ed25519')), { multiaddrs: [multiaddr('/ip4/127.0.0.1/tcp/9')] })
      }
      const bound = node.host.services.peerStoreBound
      // the disk fills: the record of a peer met now is kept in memory (peer-store-memory.ts)
      faulty.failing = true
      await store.merge(peerIdFromPrivateKey(await generateKeyPair('Ed25519')), { multiaddrs: [multiaddr('/ip4/127.0.0.1/tcp/9')] })
      expect(node.peerStoreMemory?.held).toBe(1)
      await bound.pass()
      expect(bound.stats).toMatchObject({ records: PEER_STORE_PEERS_MAX + over + 1, pruned: 0, failures: 0, heldBack: 1 })
      // the pass took no room in memory
      expect(node.peerStoreMemory?.held).toBe(1)

      faulty.failing = false
      // the next write the disk takes ends the failing (write-guard.ts)
      await store.merge(peerIdFromPrivateKey(await generateKeyPair('Ed25519')), { multiaddrs: [multiaddr('/ip4/127.0.0.1/tcp/9')] })
      await bound.pass()
      expect(bound.stats).toMatchObject({ records: PEER_STORE_PEERS_MAX + over + 2, pruned: over + 2, failures: 0, heldBack: 1 })
    } finally {
      await node.stop()
    }
  }, 120_000)

  it('a stop does not wait for a pass whose read of the records is slow: the read ends with the stop', async () => {
    const inner = new MemoryDatastore()
    const hold = { on: false, reached: false }
    // a store whose record reads (libp2p's peer store queries /peers/) never end while held, unless their signal aborts
    const store = new Proxy(inner, {
      get (target, prop, receiver) {
        if (prop !== 'query') return Reflect.get(target, prop, receiver)
        return async function * (q: { prefix?: string }, options?: { signal?: AbortSignal }) {
          yield * target.query(q, options)
          if (!hold.on || q.prefix !== '/peers/') return
          hold.reached = true
          await new Promise((_resolve, reject) => { options?.signal?.addEventListener('abort', () => { reject(options.signal?.reason) }) })
        }
      }
    })
    const a = await createHost({ privateKey: await generateKeyPair('Ed25519'), datastore: store, listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, peerStore: { maxPeers: 1, intervalMs: 3_600_000 } })
    await a.start()
    for (let i = 0; i < 3; i++) await meetAndLeave(a, await stranger())
    hold.on = true
    const pass = a.services.peerStoreBound.pass()
    await until(() => hold.reached, 'the pass reading the records')
    await a.stop()
    await pass
    // ended by the stop: not a failure, nothing deleted
    expect(a.services.peerStoreBound.stats).toMatchObject({ pruned: 0, failures: 0 })
  })
})
