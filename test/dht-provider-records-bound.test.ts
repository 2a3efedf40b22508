/**
 * A bound on the provider records other peers have a node store: kad-dht
 * writes every ADD_PROVIDER whose provider is its sender, for any key, into
 * the datastore for 12 h, so one stranger could grow a node's store without
 * end. Each provider now has a token bucket (DHT_PROVIDER_ADDS_PER_PEER_BURST,
 * refilled at DHT_PROVIDER_ADDS_PER_PEER_PER_HOUR); past it records are not
 * stored, and counted. Found by session 45's card review.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import type { PeerId } from '@libp2p/interface'
import { CID } from 'multiformats/cid'
import * as raw from 'multiformats/codecs/raw'
import { sha256 } from 'multiformats/hashes/sha2'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { DHT_PROVIDER_ADDS_PER_PEER_BURST, DHT_PROVIDER_ADDS_PER_PEER_PER_HOUR } from '../src/wire/network-constants.ts'
import { limitProviderRecords, providerRecordStats } from '../src/wire/provider-records.ts'
import { ownProviderRecords } from '../src/wire/provider-answers.ts'
import { startMesh, stopAll } from './helpers.ts'

const keyOf = async (i: number): Promise<CID> => CID.createV1(raw.code, await sha256.digest(new TextEncoder().encode(`key-${i}`)))
const peer = async (): Promise<PeerId> => peerIdFromPrivateKey(await generateKeyPair('Ed25519'))

interface Store { addProvider: (key: unknown, provider: PeerId) => Promise<void>, getProviders: (key: unknown) => Promise<PeerId[]> }

describe('provider records other peers have a node store', () => {
  it('a token bucket per provider: a burst, then the hourly rate; this node\'s own records and other providers unaffected', async () => {
    const self = await peer()
    const [a, b] = [await peer(), await peer()]
    const written: string[] = []
    const dht = { providers: { addProvider: async (_key: unknown, p: PeerId) => { written.push(p.toString()) } } }
    let clock = 0
    const refusedFrom: string[] = []
    expect(limitProviderRecords(dht, self, p => { refusedFrom.push(p.toString()) }, { burst: 5, perHour: 2, peersTracked: 8 }, () => clock)).toBe(true)
    const add = async (p: PeerId, n: number): Promise<void> => { for (let i = 0; i < n; i++) await (dht.providers as unknown as Store).addProvider(await keyOf(i), p) }
    await add(a, 8)
    expect(written.filter(w => w === a.toString())).toHaveLength(5)
    expect(refusedFrom).toEqual([a.toString()])
    await add(self, 20)
    await add(b, 5)
    expect(written.filter(w => w === self.toString())).toHaveLength(20)
    expect(written.filter(w => w === b.toString())).toHaveLength(5)
    // half an hour later: one more record of a's fits
    clock += 30 * 60 * 1000
    await add(a, 3)
    expect(written.filter(w => w === a.toString())).toHaveLength(6)
    // other peers' records only
    expect(providerRecordStats(dht)).toEqual({ stored: 5 + 5 + 1, refused: 3 + 2 })
    expect(DHT_PROVIDER_ADDS_PER_PEER_PER_HOUR).toBeGreaterThan(0)
  })

  describe('on a real node', () => {
    let nodes: MeshNode[] = []
    beforeAll(async () => { nodes = await startMesh(1) })
    afterAll(async () => { await stopAll(nodes) })

    it('kad-dht\'s own provider store is bounded: records past a stranger\'s burst are not stored', async () => {
      const node = nodes[0]!
      const store = (node.host.services.dht as unknown as { providers: Store }).providers
      const stranger = await peer()
      const over = 50
      const key = async (i: number): Promise<CID> => keyOf(1_000_000 + i)
      for (let i = 0; i < DHT_PROVIDER_ADDS_PER_PEER_BURST + over; i++) await store.addProvider(await key(i), stranger)
      expect(providerRecordStats(node.host.services.dht)).toMatchObject({ refused: over })
      // the last record within the burst is held, the first past it is not
      // every record of the key, providers the peer store does not know included
      const read = ownProviderRecords(node.host.services.dht)!
      const held = async (i: number): Promise<boolean> => (await read(await key(i))).some(p => p.equals(stranger))
      expect(await held(DHT_PROVIDER_ADDS_PER_PEER_BURST - 1)).toBe(true)
      expect(await held(DHT_PROVIDER_ADDS_PER_PEER_BURST)).toBe(false)
    })
  })
})
