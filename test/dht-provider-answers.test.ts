/**
 * Issue #17: an answer to a provider lookup names at most
 * DHT_PROVIDERS_PER_ANSWER providers, a fresh random pick each time when the
 * node holds more (kad-dht alone names every one it holds, so an answer grew
 * with the mesh). A provider the node has no peer entry for is left out of
 * the answer, not allowed to fail it. A key's records are read once for the
 * answers of DHT_PROVIDER_READ_TTL_MS, and again at once after a change.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PeerId } from '@libp2p/interface'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityKey } from '../src/card/card.ts'
import { DHT_PROVIDERS_PER_ANSWER } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import { DHT_PROVIDER_READ_TTL_MS } from '../src/wire/network-constants.ts'
import { limitProviderAnswers, providerAnswerStats } from '../src/wire/provider-answers.ts'
import { startMesh, stopAll } from './helpers.ts'

const HELD = DHT_PROVIDERS_PER_ANSWER + 10

describe('provider answers are bounded', () => {
  let nodes: MeshNode[] = []
  beforeAll(async () => { nodes = await startMesh(2, { bootstrapOf: i => i - 1 }) })
  afterAll(async () => { await stopAll(nodes) })

  it(`names at most ${DHT_PROVIDERS_PER_ANSWER} of the ${HELD} providers a node holds, a different pick each time`, async () => {
    const [S, A] = nodes as [MeshNode, MeshNode]
    const key = await capabilityKey('cap:bounded-answers')
    const store = (S.host.services.dht as unknown as { providers: { addProvider: (k: unknown, p: unknown) => Promise<void> } }).providers
    const held = new Set<string>()
    for (let i = 0; i < HELD; i++) {
      const id = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
      // an address in the peer store, as an ADD_PROVIDER leaves it (never dialed here)
      await S.host.peerStore.merge(id, { multiaddrs: [multiaddr(`/ip4/127.0.0.1/tcp/${4000 + i}`)] })
      await store.addProvider(key, id)
      held.add(id.toString())
    }
    const answer = async (): Promise<string[]> => {
      for await (const ev of A.host.services.dht.findProviders(key, { signal: AbortSignal.timeout(10_000) })) {
        if (ev.name === 'PEER_RESPONSE' && ev.from.equals(peerIdOfAgent(S.agentId))) return ev.providers.map(p => p.id.toString())
      }
      throw new Error('S did not answer')
    }
    const first = await answer()
    const second = await answer()
    for (const a of [first, second]) {
      expect(a).toHaveLength(DHT_PROVIDERS_PER_ANSWER)
      expect(new Set(a).size).toBe(a.length)
      expect(a.every(id => held.has(id))).toBe(true)
    }
    // two picks of 20 of 30 are the same with odds of 1 in 30 million
    expect(new Set([...first, ...second]).size).toBeGreaterThan(DHT_PROVIDERS_PER_ANSWER)
  })

  it('names the providers it knows when it holds a record of one it has no peer entry for', async () => {
    const [S, A] = nodes as [MeshNode, MeshNode]
    const key = await capabilityKey('cap:stale-record')
    const store = (S.host.services.dht as unknown as { providers: { addProvider: (k: unknown, p: unknown) => Promise<void> } }).providers
    const known = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
    await S.host.peerStore.merge(known, { multiaddrs: [multiaddr('/ip4/127.0.0.1/tcp/4999')] })
    await store.addProvider(key, known)
    // a record whose provider's peer entry is gone (entries expire after 6 h without contact, records after 12 h):
    // kad-dht alone failed the whole answer on it
    const gone = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
    await store.addProvider(key, gone)
    const before = providerAnswerStats(S.host.services.dht).unknownProviders
    let named: string[] | undefined
    for await (const ev of A.host.services.dht.findProviders(key, { signal: AbortSignal.timeout(10_000) })) {
      if (ev.name === 'QUERY_ERROR') throw ev.error
      if (ev.name === 'PEER_RESPONSE' && ev.from.equals(peerIdOfAgent(S.agentId))) named = ev.providers.map(p => p.id.toString())
    }
    expect(named).toEqual([known.toString()])
    expect(providerAnswerStats(S.host.services.dht).unknownProviders).toBe(before + 1)
  })

  it('says so when a kad-dht has no provider store to limit', () => {
    const known = async (): Promise<boolean> => true
    expect(limitProviderAnswers({}, 5, known)).toBe(false)
    expect(limitProviderAnswers(undefined, 5, known)).toBe(false)
    expect(providerAnswerStats(undefined).unknownProviders).toBe(0)
  })
})

describe('a key\'s provider records are read once for the answers of a few seconds', () => {
  /** A provider store as kad-dht's looks to the wrapper: reads counted, each one waiting for `gate` when set. */
  function store (): { dht: { providers: Record<string, unknown> }, held: Map<string, PeerId[]>, reads: () => number, gate: { wait?: Promise<void> } } {
    const held = new Map<string, PeerId[]>()
    let reads = 0
    const gate: { wait?: Promise<void> } = {}
    const providers = {
      getProviders: async (key: unknown) => {
        reads++
        const now = [...(held.get(String(key)) ?? [])]
        await gate.wait
        return now
      },
      addProvider: async (key: unknown, peer: PeerId) => { held.set(String(key), [...(held.get(String(key)) ?? []), peer]) },
      removeProvider: async (key: unknown, peer: PeerId) => { held.set(String(key), (held.get(String(key)) ?? []).filter(p => !p.equals(peer))) }
    }
    return { dht: { providers }, held, reads: () => reads, gate }
  }
  const newPeer = async (): Promise<PeerId> => peerIdFromPrivateKey(await generateKeyPair('Ed25519'))

  it('answers from one read until DHT_PROVIDER_READ_TTL_MS has passed, and reads again at once after a record is added or removed', async () => {
    const s = store()
    let clock = 1_000_000
    expect(limitProviderAnswers(s.dht, DHT_PROVIDERS_PER_ANSWER, async () => true, () => clock)).toBe(true)
    const p = s.dht.providers as unknown as { getProviders: (k: unknown) => Promise<PeerId[]>, addProvider: (k: unknown, p: PeerId) => Promise<void>, removeProvider: (k: unknown, p: PeerId) => Promise<void> }
    const key = await capabilityKey('cap:read-once')
    const [a, b] = [await newPeer(), await newPeer()]
    await p.addProvider(key, a)
    expect((await p.getProviders(key)).map(String)).toEqual([a.toString()])
    expect((await p.getProviders(key)).map(String)).toEqual([a.toString()])
    expect(s.reads()).toBe(1)
    // a record added through the store is named by the next answer
    await p.addProvider(key, b)
    expect((await p.getProviders(key)).map(String).sort()).toEqual([a.toString(), b.toString()].sort())
    expect(s.reads()).toBe(2)
    await p.removeProvider(key, a)
    expect((await p.getProviders(key)).map(String)).toEqual([b.toString()])
    expect(s.reads()).toBe(3)
    // a record deleted from the datastore directly (kad-dht's cleanup of expired ones) is named until the read is old
    s.held.set(String(key), [])
    clock += DHT_PROVIDER_READ_TTL_MS - 1
    expect(await p.getProviders(key)).toHaveLength(1)
    clock += 1
    expect(await p.getProviders(key)).toHaveLength(0)
    expect(s.reads()).toBe(4)
  })

  it('does not keep a read that a record added meanwhile has made stale', async () => {
    const s = store()
    expect(limitProviderAnswers(s.dht, DHT_PROVIDERS_PER_ANSWER, async () => true)).toBe(true)
    const p = s.dht.providers as unknown as { getProviders: (k: unknown) => Promise<PeerId[]>, addProvider: (k: unknown, p: PeerId) => Promise<void> }
    const key = await capabilityKey('cap:read-raced')
    const a = await newPeer()
    let open!: () => void
    s.gate.wait = new Promise<void>(resolve => { open = resolve })
    const early = p.getProviders(key)
    await p.addProvider(key, a)
    open()
    // the read began before the record: it names nobody, and the next answer reads again
    expect(await early).toEqual([])
    expect((await p.getProviders(key)).map(String)).toEqual([a.toString()])
    expect(s.reads()).toBe(2)
  })
})
