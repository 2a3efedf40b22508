/**
 * A node listening on a wildcard address (0.0.0.0, ::: the CLI's default)
 * serves the network, not this machine: a stranger that names loopback
 * addresses for itself (identify) must not get them dialed
 * (src/wire/address-filter.ts). They stay in the peer store, undialed (kad-dht
 * leaves a peer with no kept address out of its routing table, and libp2p
 * announces only loopback until a public address is verified). A node that
 * listens on an explicit loopback address (local tests, simulations) dials
 * them: its peers are processes on the same machine. A /tls/sni name is a
 * host too (session 57's review: the WebSockets transport dials it).
 */
import { createServer, type AddressInfo, type Server } from 'node:net'
import { afterAll, describe, expect, it } from 'vitest'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { identify } from '@libp2p/identify'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { tcp } from '@libp2p/tcp'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p, type Libp2p } from 'libp2p'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { AddressFilter, addressFilterOf } from '../src/wire/address-filter.ts'
import { until } from './helpers.ts'

const me = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
const other = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
const loopbacks = ['/ip4/127.0.0.1/tcp/22', '/ip4/127.0.0.1/tcp/6379', '/ip6/::1/tcp/22', '/ip4/127.3.2.1/tcp/80']

describe('loopback addresses of other peers', () => {
  it('are not dialed by a node that listens on a wildcard address only, and are by one that listens on loopback', () => {
    for (const listen of ['/ip4/0.0.0.0/tcp/4001', '/ip6/::/tcp/4001']) {
      const wildcard = new AddressFilter(me, { listen: [listen], localMesh: false })
      expect(wildcard.loopbackOk, listen).toBe(false)
      for (const a of loopbacks) {
        expect(wildcard.mayDial(multiaddr(a)), `${listen} dials ${a}`).toBe(false)
        expect(wildcard.mayDial(multiaddr(`${a}/p2p/${other.toString()}`)), `${listen} dials ${a}`).toBe(false)
        // kept, undialed: kad-dht takes a connected peer into its table only when it has an address
        expect(wildcard.mayKeep(other, multiaddr(a)), `${listen} keeps ${a}`).toBe(true)
      }
      // a relay on this machine is no more dialable than any other loopback address
      expect(wildcard.mayDial(multiaddr(`/ip4/127.0.0.1/tcp/4002/p2p/${other.toString()}/p2p-circuit/p2p/${me.toString()}`))).toBe(false)
    }
    for (const listen of [['/ip4/127.0.0.1/tcp/4001'], ['/ip6/::1/tcp/4001'], ['/ip4/0.0.0.0/tcp/4001', '/ip4/127.0.0.1/tcp/4002']]) {
      const local = new AddressFilter(me, { listen, localMesh: false })
      for (const a of loopbacks) expect(local.mayDial(multiaddr(a)), `${listen.join(' ')} dials ${a}`).toBe(true)
    }
    // a local mesh dials them whatever it listens on
    expect(new AddressFilter(me, { listen: ['/ip4/0.0.0.0/tcp/0'], localMesh: true }).mayDial(multiaddr(loopbacks[0]!))).toBe(true)
    // a node that listens on a public address only neither keeps nor dials them
    const publicNode = new AddressFilter(me, { listen: ['/ip4/203.0.113.5/tcp/4001'], localMesh: false })
    expect(publicNode.mayKeep(other, multiaddr(loopbacks[0]!))).toBe(false)
  })

  it('a /tls/sni name is judged as the host it is (the WebSockets transport dials wss://<sni>, not the IP before it): a loopback or private sni is not dialed, nor kept where its IP would not be', async () => {
    const wildcard = new AddressFilter(me, { listen: ['/ip4/0.0.0.0/tcp/4001'], localMesh: false })
    const id = other.toString()
    expect(wildcard.mayDial(multiaddr(`/ip4/203.0.113.9/tcp/22/tls/sni/127.0.0.1/ws/p2p/${id}`))).toBe(false)
    expect(wildcard.mayDial(multiaddr(`/ip6/2001:db8::1/tcp/22/tls/sni/169.254.169.254/ws/p2p/${id}`))).toBe(false)
    // a name is looked up as a /dns one is: localhost is this machine
    expect(await wildcard.mayDial(multiaddr(`/ip4/203.0.113.9/tcp/22/tls/sni/localhost/ws/p2p/${id}`))).toBe(false)
    // the same with a public sni, and no sni, is dialed (never here: only judged)
    expect(wildcard.mayDial(multiaddr(`/ip4/203.0.113.9/tcp/22/tls/sni/203.0.113.10/ws/p2p/${id}`))).toBe(true)
    expect(wildcard.mayDial(multiaddr(`/ip4/203.0.113.9/tcp/22/tls/ws/p2p/${id}`))).toBe(true)
    const publicNode = new AddressFilter(me, { listen: ['/ip4/203.0.113.5/tcp/4001'], localMesh: false })
    expect(publicNode.mayKeep(other, multiaddr('/ip4/203.0.113.9/tcp/22/tls/sni/127.0.0.1/ws'))).toBe(false)
    expect(publicNode.mayKeep(other, multiaddr('/ip4/203.0.113.9/tcp/22/tls/sni/10.0.0.1/ws'))).toBe(false)
    // what the operator configured is allowed, its sni name too
    publicNode.allowConfigured(['/ip4/203.0.113.9/tcp/443/tls/sni/10.0.0.1/ws'])
    expect(publicNode.mayDial(multiaddr(`/ip4/203.0.113.9/tcp/443/tls/sni/10.0.0.1/ws/p2p/${id}`))).toBe(true)
  })

  describe('named by a stranger in its identify', () => {
    const nodes: MeshNode[] = []
    const strangers: Libp2p[] = []
    const services: Server[] = []
    afterAll(async () => {
      await Promise.all(strangers.map(async s => s.stop()))
      await Promise.all(nodes.map(async n => n.stop()))
      await Promise.all(services.map(async s => new Promise<void>(resolve => { s.close(() => { resolve() }) })))
    })

    /** A service on this machine (it hangs up at once) and how many connections it took. */
    async function localService (): Promise<{ address: string, accepted: () => number }> {
      let accepted = 0
      const server = createServer(socket => { accepted++; socket.destroy() })
      services.push(server)
      await new Promise<void>(resolve => { server.listen(0, '127.0.0.1', resolve) })
      return { address: `/ip4/127.0.0.1/tcp/${(server.address() as AddressInfo).port}`, accepted: () => accepted }
    }

    /** A stock libp2p peer that dials `node` (it listens nowhere), names `service` as its own address, and hangs up. */
    async function strangerNaming (node: MeshNode, service: string): Promise<Libp2p> {
      const stranger = await createLibp2p({
        addresses: { announce: [service] },
        transports: [tcp()],
        connectionEncrypters: [noise()],
        streamMuxers: [yamux()],
        services: { identify: identify() }
      })
      strangers.push(stranger)
      const at = node.addresses.find(a => a.startsWith('/ip4/127.0.0.1/'))
      expect(at, node.addresses.join(' ')).toBeDefined()
      await stranger.dial(multiaddr(at!))
      // identify writes the stranger's addresses, then its agent version
      await until(async () => node.host.peerStore.get(stranger.peerId).then(p => p.metadata.has('AgentVersion'), () => false), 'the node to read the stranger\'s identify')
      await stranger.hangUp(node.host.peerId)
      await until(() => node.host.getConnections(stranger.peerId).length === 0, 'the stranger gone')
      return stranger
    }

    it('a node on 0.0.0.0 does not dial it; a node on 127.0.0.1 does', async () => {
      const wildcard = await createMeshNode({ listen: ['/ip4/0.0.0.0/tcp/0'], logger: silentLogger() })
      const local = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], logger: silentLogger() })
      nodes.push(wildcard, local)
      await Promise.all(nodes.map(async n => n.start()))

      const target = await localService()
      const stranger = await strangerNaming(wildcard, target.address)
      const refusedBefore = addressFilterOf(wildcard.host.peerId)!.refused
      // as a DHT query or a call would: the node dials the stranger by its peer id
      const err = await wildcard.host.dial(stranger.peerId, { signal: AbortSignal.timeout(5000) }).then(() => undefined, (e: unknown) => e as Error)
      expect(err?.name).toMatch(/DialDenied|NoValidAddresses/)
      expect(target.accepted()).toBe(0)
      expect(addressFilterOf(wildcard.host.peerId)!.refused).toBeGreaterThan(refusedBefore)
      // nor a loopback address it is handed directly
      const denied = await wildcard.host.dial(multiaddr(`${target.address}/p2p/${other.toString()}`), { signal: AbortSignal.timeout(5000) }).then(() => undefined, (e: unknown) => e as Error)
      expect(denied?.name).toBe('DialDeniedError')
      expect(target.accepted()).toBe(0)

      // a node on loopback dials a loopback address it was given: its peers there are on this machine
      const reached = await localService()
      const other2 = await strangerNaming(local, reached.address)
      await local.host.dial(other2.peerId, { signal: AbortSignal.timeout(5000) }).then(() => undefined, () => undefined)
      expect(reached.accepted()).toBeGreaterThan(0)
    }, 30_000)

    it('a node on 0.0.0.0 does not dial a DNS name that points at loopback; a node on 127.0.0.1 does', async () => {
      const wildcard = await createMeshNode({ listen: ['/ip4/0.0.0.0/tcp/0'], logger: silentLogger() })
      const local = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], logger: silentLogger() })
      nodes.push(wildcard, local)
      await Promise.all([wildcard.start(), local.start()])
      const target = await localService()
      const port = target.address.split('/').at(-1)
      // localhost: looked up in this machine's hosts file, as every name is before it is dialed
      const named = multiaddr(`/dns4/localhost/tcp/${port}/p2p/${other.toString()}`)
      const dial = async (n: MeshNode): Promise<Error | undefined> => n.host.dial(named, { signal: AbortSignal.timeout(5000) }).then(() => undefined, (e: unknown) => e as Error)
      // the first dial starts the lookup and is refused; the next ones are judged by its answer
      expect((await dial(wildcard))?.name).toBe('DialDeniedError')
      const filter = addressFilterOf(wildcard.host.peerId)!
      await until(() => filter.pendingNameLookups === 0, 'the lookup of localhost')
      expect(filter.lookupFailures).toBe(0)
      // before: the gater took `!` of mayDial's Promise (false), so every name was dialed: one connection here
      expect((await dial(wildcard))?.name).toBe('DialDeniedError')
      expect(target.accepted()).toBe(0)
      // a node on loopback dials it once looked up (the service is no libp2p node: the dial fails after it connects)
      await until(async () => { await dial(local); return target.accepted() > 0 }, 'the node on loopback to reach the service')
      expect(addressFilterOf(local.host.peerId)!.lookupFailures).toBe(0)
    }, 30_000)

    it('a node on 0.0.0.0 does not dial the loopback service a stranger names as its /tls/sni host', async () => {
      const node = await createMeshNode({ listen: ['/ip4/0.0.0.0/tcp/0'], logger: silentLogger() })
      nodes.push(node)
      await node.start()
      const target = await localService()
      // the service behind a made-up public IP: only 127.0.0.1 is ever contacted (the WebSockets transport dials the
      // sni host, and the TCP transport does not take a /ws address)
      const stranger = await strangerNaming(node, `/ip4/203.0.113.9/tcp/${target.address.split('/').at(-1)}/tls/sni/127.0.0.1/ws`)
      const refusedBefore = addressFilterOf(node.host.peerId)!.refused
      const err = await node.host.dial(stranger.peerId, { signal: AbortSignal.timeout(5000) }).then(() => undefined, (e: unknown) => e as Error)
      // before the sni was judged: one connection, a wss dial to 127.0.0.1
      expect(target.accepted()).toBe(0)
      expect(err?.name).toMatch(/DialDenied|NoValidAddresses/)
      expect(addressFilterOf(node.host.peerId)!.refused).toBeGreaterThan(refusedBefore)
    }, 30_000)
  })
})
