/**
 * Issue #17: an answer to a provider lookup names at most
 * DHT_PROVIDERS_PER_ANSWER providers, a fresh random pick each time when the
 * node holds more (kad-dht alone names every one it holds, so an answer grew
 * with the mesh). A provider the node has no peer entry for is left out of
 * the answer, not allowed to fail it.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { capabilityKey } from '../src/card/card.ts'
import { DHT_PROVIDERS_PER_ANSWER } from '../src/constants.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
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
