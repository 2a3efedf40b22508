/**
 * A /tls/sni name is a host too: @libp2p/websockets dials wss://<sni>:<port>,
 * not the IP before it, so /ip4/203.0.113.9/tcp/<port>/tls/sni/127.0.0.1/ws
 * had a node on 0.0.0.0 dial a service on its own machine
 * (src/wire/address-filter.ts, found by a review). Only 127.0.0.1 is ever
 * contacted here: the WebSockets transport dials the sni host, and the TCP
 * transport does not take a /ws address.
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

describe('a /tls/sni name in a peer\'s address', () => {
  const nodes: MeshNode[] = []
  const strangers: Libp2p[] = []
  const services: Server[] = []
  afterAll(async () => {
    await Promise.all(strangers.map(async s => s.stop()))
    await Promise.all(nodes.map(async n => n.stop()))
    await Promise.all(services.map(async s => new Promise<void>(resolve => { s.close(() => { resolve() }) })))
  })

  it('is judged as the host it is: a loopback or private sni is not dialed, nor kept where its IP would not be', async () => {
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

  it('a node on 0.0.0.0 does not dial the loopback service a stranger names as its sni', async () => {
    let accepted = 0
    const server = createServer(socket => { accepted++; socket.destroy() })
    services.push(server)
    await new Promise<void>(resolve => { server.listen(0, '127.0.0.1', resolve) })
    const port = (server.address() as AddressInfo).port

    const node = await createMeshNode({ listen: ['/ip4/0.0.0.0/tcp/0'], logger: silentLogger() })
    nodes.push(node)
    await node.start()
    // a stock libp2p peer that listens nowhere, names the service behind a made-up public IP, dials and hangs up
    const stranger = await createLibp2p({
      addresses: { announce: [`/ip4/203.0.113.9/tcp/${port}/tls/sni/127.0.0.1/ws`] },
      transports: [tcp()],
      connectionEncrypters: [noise()],
      streamMuxers: [yamux()],
      services: { identify: identify() }
    })
    strangers.push(stranger)
    const at = node.addresses.find(a => a.startsWith('/ip4/127.0.0.1/'))
    expect(at, node.addresses.join(' ')).toBeDefined()
    await stranger.dial(multiaddr(at!))
    await until(async () => node.host.peerStore.get(stranger.peerId).then(p => p.metadata.has('AgentVersion'), () => false), 'the node to read the stranger\'s identify')
    await stranger.hangUp(node.host.peerId)
    await until(() => node.host.getConnections(stranger.peerId).length === 0, 'the stranger gone')

    const refusedBefore = addressFilterOf(node.host.peerId)!.refused
    const err = await node.host.dial(stranger.peerId, { signal: AbortSignal.timeout(5000) }).then(() => undefined, (e: unknown) => e as Error)
    // the loopback service took no connection (before the fix: one, a wss dial to 127.0.0.1)
    expect(accepted).toBe(0)
    expect(err?.name).toMatch(/DialDenied|NoValidAddresses/)
    expect(addressFilterOf(node.host.peerId)!.refused).toBeGreaterThan(refusedBefore)
  }, 30_000)
})
