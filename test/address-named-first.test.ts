/**
 * Addresses a stranger named first for a peer never keep that peer's real
 * addresses out of the peer store. A per-turn cap on one peer's addresses
 * (tried in session 50) counted the held ones first, as libp2p's merge lists
 * them: once a DHT answer had named 32 made-up addresses for W, every later
 * merge of W's real address was refused until the made-up ones aged out (an
 * hour), so this node could dial W only at addresses that lead nowhere.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { DHT_NAMED_ADDRS_MAX } from '../src/wire/network-constants.ts'

describe('addresses named first for a peer', () => {
  let V: MeshNode | undefined
  beforeAll(async () => {
    V = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], logger: silentLogger() })
    await V.start()
  })
  afterAll(async () => { await V?.stop() })

  it('do not keep a real address named later out of the store', async () => {
    const W = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
    // as many as one DHT answer may name for a peer (public documentation ranges: nothing there)
    const madeUp = Array.from({ length: DHT_NAMED_ADDRS_MAX }, (_, i) => multiaddr(`/ip4/198.51.100.${i + 1}/tcp/4001`))
    await V!.host.peerStore.merge(W, { multiaddrs: madeUp })
    // a later turn of the event loop, as a later answer comes in
    await new Promise(resolve => setImmediate(resolve))
    const real = multiaddr('/ip4/203.0.113.7/tcp/4001')
    await V!.host.peerStore.merge(W, { multiaddrs: [real] })
    const addrs = (await V!.host.peerStore.get(W)).addresses.map(a => a.multiaddr.toString())
    expect(addrs).toContain(real.toString())
    expect(addrs).toHaveLength(DHT_NAMED_ADDRS_MAX + 1)
  })
})
