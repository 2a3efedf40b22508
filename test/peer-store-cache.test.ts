/**
 * Issue #17: the read cache in front of libp2p's peer store
 * (src/wire/peer-store-cache.ts). Reads and no-change merges are answered from
 * memory; a write is never hidden, not from a read that ran beside it either;
 * expired tags are not handed out; entries age out. Against libp2p's own
 * persistent peer store on an in-memory datastore, with a clock the test moves.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { Libp2pEvents, PeerId, PeerStore } from '@libp2p/interface'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { persistentPeerStore } from '@libp2p/peer-store'
import { multiaddr } from '@multiformats/multiaddr'
import { MemoryDatastore } from 'datastore-core'
import type { TypedEventTarget } from 'main-event'
import { describe, expect, it } from 'vitest'
import { PEER_STORE_CACHE_MAX, PEER_STORE_CACHE_TTL_MS } from '../src/constants.ts'
import { cachePeerStore, type PeerStoreCacheStats } from '../src/wire/peer-store-cache.ts'
import { quietLibp2pLogger } from '../src/wire/libp2p-log.ts'
import { startLoopbackHost } from './helpers.ts'
import { peerStoreCacheStats } from '../src/wire/host.ts'

class Events extends EventTarget {
  safeDispatchEvent (type: string, detail?: { detail?: unknown }): boolean { return this.dispatchEvent(new CustomEvent(type, detail)) }
}

async function newPeer (): Promise<PeerId> { return peerIdFromPrivateKey(await generateKeyPair('Ed25519')) }

async function cachedStore (): Promise<{ store: PeerStore, stats: PeerStoreCacheStats, clock: { t: number } }> {
  const clock = { t: Date.now() }
  const store = persistentPeerStore({
    peerId: await newPeer(),
    datastore: new MemoryDatastore(),
    events: new Events() as unknown as TypedEventTarget<Libp2pEvents>,
    logger: quietLibp2pLogger
  })
  const stats = cachePeerStore(store, () => clock.t)
  return { store, stats, clock }
}

const A = multiaddr('/ip4/127.0.0.1/tcp/4001')
const B = multiaddr('/ip4/127.0.0.1/tcp/4002')
const addrs = (peer: { addresses: Array<{ multiaddr: { toString: () => string } }> }): string[] => peer.addresses.map(a => a.multiaddr.toString()).sort()

describe('peer-store read cache', () => {
  it('answers repeated reads from memory and sees every write', async () => {
    const { store, stats } = await cachedStore()
    const p = await newPeer()
    await store.merge(p, { multiaddrs: [A] })
    expect(addrs(await store.get(p))).toEqual([A.toString()])
    expect((await store.getInfo(p)).multiaddrs.map(String)).toEqual([A.toString()])
    expect(await store.has(p)).toBe(true)
    expect(stats.hits).toBe(3)
    expect(stats.misses).toBe(0)

    await store.merge(p, { multiaddrs: [B] })
    expect(addrs(await store.get(p))).toEqual([A.toString(), B.toString()])
    await store.patch(p, { multiaddrs: [B] })
    expect(addrs(await store.get(p))).toEqual([B.toString()])
    await store.merge(p, { tags: { t: { value: 7 } } })
    expect((await store.get(p)).tags.get('t')?.value).toBe(7)
    await store.save(p, { multiaddrs: [A] })
    const saved = await store.get(p)
    expect(addrs(saved)).toEqual([A.toString()])
    expect(saved.tags.has('t')).toBe(false)

    await store.delete(p)
    await expect(store.get(p)).rejects.toThrow(expect.objectContaining({ name: 'NotFoundError' }) as Error)
    expect(await store.has(p)).toBe(false)
  })

  it('skips a merge of addresses and protocols it already holds, and only that', async () => {
    const { store, stats } = await cachedStore()
    const p = await newPeer()
    await store.merge(p, { multiaddrs: [A, B], protocols: ['/a/1'] })
    await store.merge(p, { multiaddrs: [B] })
    await store.merge(p, { multiaddrs: [A, B] })
    await store.merge(p, { protocols: ['/a/1'] })
    expect(stats.mergesSkipped).toBe(3)
    // a new protocol or address, or anything besides those: written
    await store.merge(p, { protocols: ['/b/1'] })
    expect((await store.get(p)).protocols.sort()).toEqual(['/a/1', '/b/1'])
    await store.merge(p, { multiaddrs: [A], tags: { x: { value: 1 } } })
    expect(stats.mergesSkipped).toBe(3)
    expect((await store.get(p)).tags.get('x')?.value).toBe(1)
    // a peer the cache does not hold is merged by the store
    const q = await newPeer()
    await store.merge(q, { multiaddrs: [A] })
    expect(stats.mergesSkipped).toBe(3)
    expect(addrs(await store.get(q))).toEqual([A.toString()])
  })

  it('never caches a read that a write overtook', async () => {
    const { store } = await cachedStore()
    const p = await newPeer()
    await store.merge(p, { multiaddrs: [A] })
    // age the entry out so the next read goes to the store, then write while that read runs
    const { store: other, clock } = await cachedStore()
    await other.merge(p, { multiaddrs: [A] })
    clock.t += PEER_STORE_CACHE_TTL_MS
    const reading = other.get(p)
    const writing = other.merge(p, { multiaddrs: [B] })
    // the read began first and sees the old addresses; a read asked for after the write began sees the new ones
    expect(addrs(await reading)).toEqual([A.toString()])
    expect(addrs(await other.get(p))).toEqual([A.toString(), B.toString()])
    await writing
    expect(addrs(await other.get(p))).toEqual([A.toString(), B.toString()])
    // two writes at once: what the cache holds after both is what the store holds
    await Promise.all([store.merge(p, { multiaddrs: [B] }), store.patch(p, { tags: { y: { value: 2 } } })])
    const after = await store.get(p)
    expect(addrs(after)).toEqual([A.toString(), B.toString()])
    expect(after.tags.get('y')?.value).toBe(2)
  })

  it('hands out copies, without tags that expired', async () => {
    const { store, clock } = await cachedStore()
    const p = await newPeer()
    await store.merge(p, { multiaddrs: [A], tags: { short: { value: 1, ttl: 1_000 }, long: { value: 2 } } })
    const first = await store.get(p)
    first.tags.delete('long')
    first.addresses.length = 0
    const second = await store.get(p)
    expect([...second.tags.keys()].sort()).toEqual(['long', 'short'])
    expect(addrs(second)).toEqual([A.toString()])
    clock.t += 2_000
    expect([...(await store.get(p)).tags.keys()]).toEqual(['long'])
  })

  it('lets entries age out and holds at most PEER_STORE_CACHE_MAX peers', async () => {
    const { store, stats, clock } = await cachedStore()
    const p = await newPeer()
    await store.merge(p, { multiaddrs: [A] })
    clock.t += PEER_STORE_CACHE_TTL_MS
    await store.get(p)
    expect(stats.misses).toBe(1)
    await store.get(p)
    expect(stats.hits).toBe(1)
    // one more peer than the cache holds: the oldest (p) is read from the store again
    for (let i = 0; i < PEER_STORE_CACHE_MAX; i++) await store.merge(await newPeer(), { multiaddrs: [B] })
    await store.get(p)
    expect(stats.misses).toBe(2)
  })

  it('is in front of every host\'s peer store', async () => {
    const [a, b] = await Promise.all([startLoopbackHost(), startLoopbackHost()])
    try {
      await a.dial(b.getMultiaddrs()[0]!)
      const before = peerStoreCacheStats(a).hits
      await a.peerStore.get(b.peerId)
      await a.peerStore.get(b.peerId)
      expect(peerStoreCacheStats(a).hits).toBeGreaterThanOrEqual(before + 1)
    } finally {
      await Promise.all([a.stop(), b.stop()])
    }
  })
})
