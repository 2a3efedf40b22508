/**
 * Which addresses of other peers a node keeps and dials
 * (src/wire/address-filter.ts, and dht-repeats.ts for DHT answers). A
 * stranger's DHT answer names made-up peers with addresses of its choice:
 * thousands of them, private and link-local ones, DNS names. The stranger
 * here is a stock libp2p node speaking the mesh's DHT protocol.
 */
import { Resolver } from 'node:dns/promises'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { identify } from '@libp2p/identify'
import { ping } from '@libp2p/ping'
import { kadDHT, passthroughMapper, type KadDHT } from '@libp2p/kad-dht'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { tcp } from '@libp2p/tcp'
import type { PeerId } from '@libp2p/interface'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p, type Libp2p } from 'libp2p'
import { DHT_PROTOCOL } from '../src/constants.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { AddressFilter, addressFilterOf, kindOfIp } from '../src/wire/address-filter.ts'
import { dhtRepeats } from '../src/wire/host.ts'
import { DHT_NAMED_ADDRS_MAX } from '../src/wire/network-constants.ts'
import { until } from './helpers.ts'

const me = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
const other = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
const ma = multiaddr

describe('the address policy', () => {
  it('sorts addresses by kind', () => {
    expect(['169.254.169.254', '0.0.0.0', 'fe80::1', '::'].map(kindOfIp)).toEqual(['link-local', 'link-local', 'link-local', 'link-local'])
    expect(['127.0.0.1', '::1', '::ffff:127.0.0.1', '::ffff:7f00:1'].map(kindOfIp)).toEqual(['loopback', 'loopback', 'loopback', 'loopback'])
    expect(['10.1.2.3', '172.20.0.1', '192.168.1.1', '100.64.0.1', 'fd00::2'].map(kindOfIp)).toEqual(['private', 'private', 'private', 'private', 'private'])
    expect(['8.8.8.8', '172.32.0.1', '2001:db8::1'].map(kindOfIp)).toEqual(['public', 'public', 'public'])
  })

  it('keeps loopback and private addresses only where the node is itself', () => {
    const publicNode = new AddressFilter(me, { listen: ['/ip4/203.0.113.5/tcp/1'], localMesh: false })
    const lanNode = new AddressFilter(me, { listen: ['/ip4/192.168.1.5/tcp/1'], localMesh: false })
    const localNode = new AddressFilter(me, { listen: ['/ip4/127.0.0.1/tcp/1'], localMesh: false })
    const keeps = (f: AddressFilter, a: string): boolean => f.mayKeep(other, ma(a))
    for (const f of [publicNode, lanNode, localNode]) {
      expect(keeps(f, '/ip4/169.254.169.254/tcp/80')).toBe(false)
      expect(keeps(f, '/ip6/fe80::1/tcp/80')).toBe(false)
      expect(keeps(f, '/ip4/0.0.0.0/tcp/80')).toBe(false)
      expect(keeps(f, '/dnsaddr/example.test')).toBe(false)
      expect(keeps(f, '/unix/%2Fvar%2Frun%2Fdocker.sock')).toBe(false)
      // one lookup, judged before a dial: a node behind a TLS proxy announces a name
      expect(keeps(f, '/dns4/agent.example.test/tcp/443/wss')).toBe(true)
      expect(keeps(f, '/ip4/8.8.8.8/tcp/1')).toBe(true)
      expect(keeps(f, '/memory/x')).toBe(true)
      // a relay address is judged by the relay's IP
      expect(keeps(f, `/ip4/169.254.1.1/tcp/1/p2p/${me.toString()}/p2p-circuit`)).toBe(false)
    }
    expect([publicNode, lanNode, localNode].map(f => keeps(f, '/ip4/127.0.0.1/tcp/1'))).toEqual([false, false, true])
    expect([publicNode, lanNode, localNode].map(f => keeps(f, '/ip4/10.0.0.7/tcp/1'))).toEqual([false, true, false])
    // a wildcard listener keeps a loopback address (it never dials it: test/address-wildcard-loopback.test.ts);
    // a local mesh allows it whatever it listens on
    expect(new AddressFilter(me, { listen: ['/ip4/0.0.0.0/tcp/1'], localMesh: false }).mayKeep(other, ma('/ip4/127.0.0.1/tcp/1'))).toBe(true)
    expect(new AddressFilter(me, { listen: ['/memory/x'], localMesh: true }).mayKeep(other, ma('/ip4/127.0.0.1/tcp/1'))).toBe(true)
    // its own addresses, whatever they are
    expect(publicNode.mayKeep(me, ma('/ip4/127.0.0.1/tcp/1'))).toBe(true)
    // dials: link-local never, a unix socket never, a /dnsaddr never (libp2p resolves those before it gates)
    expect(publicNode.mayDial(ma('/ip4/169.254.169.254/tcp/80'))).toBe(false)
    expect(publicNode.mayDial(ma('/unix/%2Fvar%2Frun%2Fdocker.sock'))).toBe(false)
    expect(publicNode.mayDial(ma('/dnsaddr/example.test'))).toBe(false)
  })

  it('dials a peer\'s DNS name only where what it resolves to may be dialed', async () => {
    const publicNode = new AddressFilter(me, { listen: ['/ip4/203.0.113.5/tcp/1'], localMesh: false })
    const localNode = new AddressFilter(me, { listen: ['/ip4/127.0.0.1/tcp/1'], localMesh: false })
    // localhost resolves to loopback: only a node on loopback itself dials it
    expect(await publicNode.mayDial(ma('/dns4/localhost/tcp/22'))).toBe(false)
    expect(await localNode.mayDial(ma('/dns4/localhost/tcp/22'))).toBe(true)
  })

  it('allows what the operator configured', () => {
    const f = new AddressFilter(me, { listen: ['/ip4/203.0.113.5/tcp/1'], localMesh: false })
    f.allowConfigured([`/ip4/10.0.0.9/tcp/4001/p2p/${other.toString()}`, '/dnsaddr/boot.example.test'])
    expect(f.mayDial(ma('/ip4/10.0.0.9/tcp/4001'))).toBe(true)
    expect(f.mayKeep(other, ma('/ip4/10.0.0.9/tcp/4001'))).toBe(true)
    expect(f.mayKeep(other, ma('/dnsaddr/boot.example.test'))).toBe(true)
    expect(f.mayKeep(other, ma('/ip4/10.0.0.9/tcp/4002'))).toBe(false)
  })
})

describe('addresses a stranger names in a DHT answer', () => {
  let V: MeshNode | undefined
  let H: Libp2p<{ dht: KadDHT }> | undefined
  const txtLookups = { n: 0 }
  const resolveTxt = Resolver.prototype.resolveTxt
  beforeAll(async () => {
    V = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() })
    await V.start()
  })
  afterAll(async () => {
    Resolver.prototype.resolveTxt = resolveTxt
    await V?.stop()
    await H?.stop()
  })

  it('keeps few, and none it must not dial', async () => {
    // counts the lookups the node makes (each still goes to the real resolver)
    Resolver.prototype.resolveTxt = async function (name: string) { txtLookups.n++; return resolveTxt.call(this, name) }
    H = await createLibp2p({
      addresses: { listen: ['/ip4/127.0.0.1/tcp/0'] },
      transports: [tcp()],
      connectionEncrypters: [noise()],
      streamMuxers: [yamux()],
      // the stranger does not resolve the names it hands out: the lookups counted are the node's
      connectionManager: { resolvers: {} },
      services: { identify: identify(), ping: ping(), dht: kadDHT({ protocol: DHT_PROTOCOL, clientMode: false, peerInfoMapper: passthroughMapper }) }
    })
    const named = async (addrs: string[]): Promise<PeerId> => {
      const fake = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
      await H!.peerStore.merge(fake, { multiaddrs: addrs.map(a => ma(a)) })
      await (H!.services.dht as unknown as { routingTable: { add: (p: PeerId) => Promise<void> } }).routingTable.add(fake)
      return fake
    }
    const many = await named(Array.from({ length: 3000 }, (_, i) => `/ip4/203.0.${113 + (i >> 8) % 2}.${i & 255}/tcp/${1000 + i}`))
    const lan = await named(['/ip4/10.1.2.3/tcp/4001', '/ip4/169.254.169.254/tcp/80', '/ip6/fe80::1/tcp/80'])
    // (localhost: any dial of a name looks it up, and a test looks up nothing beyond this machine)
    const names = await named(['/dnsaddr/l0.evil.test', '/dns4/localhost/tcp/4001'])

    await V!.join(H.getMultiaddrs().map(a => a.toString()))
    await until(async () => (await V!.host.peerStore.get(H!.peerId)).protocols.includes(DHT_PROTOCOL), 'V to see H speak the DHT')
    for (const fake of [many, lan, names]) {
      try {
        for await (const _ of V!.host.services.dht.getClosestPeers(fake.toMultihash().bytes, { signal: AbortSignal.timeout(2000) })) { /* walk */ }
      } catch (err) {
        // the walk ends at its signal: the made-up peers never answer
        expect((err as Error).name).toMatch(/Abort|Timeout/)
      }
    }
    await until(() => dhtRepeats(V!.host).namedAddrsDropped > 0, 'the answers read')
    const kept = async (p: PeerId): Promise<string[]> => V!.host.peerStore.get(p).then(r => r.addresses.map(a => a.multiaddr.toString()), () => [])
    expect((await kept(many)).length).toBeLessThanOrEqual(DHT_NAMED_ADDRS_MAX)
    expect(await kept(lan)).toEqual([])
    // the /dnsaddr name is dropped; the /dns4 name is one lookup, judged before any dial
    expect(await kept(names)).toEqual(['/dns4/localhost/tcp/4001'])
    expect(txtLookups.n).toBe(0)
  }, 60_000)

  it('refuses to dial a link-local or private address a peer named (the node has none itself)', async () => {
    const fake = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
    for (const a of ['/ip4/169.254.169.254/tcp/80', '/ip4/10.9.9.9/tcp/4001']) {
      const err = await V!.host.dial(ma(`${a}/p2p/${fake.toString()}`), { signal: AbortSignal.timeout(5000) }).then(() => undefined, (e: unknown) => e as Error)
      expect(err?.name).toBe('DialDeniedError')
    }
  }, 30_000)

  it('dials a private address the operator gave it', async () => {
    const fake = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
    const given = `/ip4/10.9.9.8/tcp/4001/p2p/${fake.toString()}`
    expect(addressFilterOf(V!.host.peerId)?.mayDial(ma(given))).toBe(false)
    // nothing answers there: the dial fails, but not at the gater
    expect(await V!.join([given], AbortSignal.timeout(300))).toBe(0)
    expect(addressFilterOf(V!.host.peerId)?.mayDial(ma(given))).toBe(true)
  }, 30_000)
})
