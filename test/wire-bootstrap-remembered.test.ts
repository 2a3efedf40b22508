/**
 * The bootstrap loop with no bootstrap address (src/wire/bootstrap.ts
 * runRemembered): what `aap-mesh start` runs without --bootstrap, so a node
 * restarted with its data dir rejoins through the peers it remembers. Real
 * loopback hosts; the remembered peers' dial is the test's own (the real one
 * is in test/remembered-peers.test.ts). A review of the first version found
 * each of these: rejoins counted as failed rounds and a count that never came
 * back to 0, a stop that did not wait for the first round's dials, and a
 * stranger's connection taken as a way into the mesh.
 */
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { tcp } from '@libp2p/tcp'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p, type Libp2p } from 'libp2p'
import { DHT_PROTOCOL } from '../src/constants.ts'
import { afterEach, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import { Bootstrapper } from '../src/wire/bootstrap.ts'
import { BOOTSTRAP_RETRY_MIN_MS } from '../src/wire/network-constants.ts'
import { AddressFilter } from '../src/wire/address-filter.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { startLoopbackHost, until } from './helpers.ts'

const hosts: MeshHost[] = []
const loops: Bootstrapper[] = []
afterEach(async () => {
  await Promise.all(loops.splice(0).map(async l => l.stop()))
  await Promise.all(hosts.splice(0).map(async h => h.stop()))
})

const plain: Libp2p[] = []
afterEach(async () => { await Promise.all(plain.splice(0).map(async p => p.stop())) })

/** A stock libp2p peer that serves no DHT (a scanner, a client): no peer of the mesh. */
async function plainPeer (): Promise<Libp2p> {
  const p = await createLibp2p({ transports: [tcp()], connectionEncrypters: [noise()], streamMuxers: [yamux()], services: { identify: identify() } })
  plain.push(p)
  return p
}

async function host (): Promise<MeshHost> {
  const h = await startLoopbackHost()
  hosts.push(h)
  return h
}

describe('the bootstrap loop with no bootstrap address', () => {
  it('counts a rejoin as no failed round, and clears the count once the node holds a connection', async () => {
    const [a, b] = [await host(), await host()]
    let dials = 0
    let answer = 0
    const joins: number[] = []
    const loop = new Bootstrapper({ host: a, addrs: [], log: silentLogger(), checkMs: 20, remembered: async () => { dials++; return answer }, hasRemembered: () => true, onJoined: (n) => { joins.push(n) } })
    loops.push(loop)
    expect(await loop.start()).toBe(0)
    // nobody answers: failed rounds, with the retry backoff
    await until(() => loop.failedRounds >= 2, 'two failed rounds')
    // a remembered peer answers (this test's dial says so): a join, not a failed round
    answer = 1
    await until(() => joins.length > 0, 'a rejoin')
    expect(loop.failedRounds).toBe(0)
    // before: the count only grew, whatever the node held
    answer = 0
    await until(() => loop.failedRounds >= 1, 'a failed round again')
    expect(await a.dial(multiaddr(`${b.getMultiaddrs()[0]!.toString()}`))).toBeDefined()
    // at the end of the wait under way, which the flap and the failed rounds have doubled (15 s at most)
    await until(() => loop.failedRounds === 0, 'the count cleared by the connection', 40_000)
    expect(dials).toBeGreaterThan(2)
  })

  it('follows a first round that reached nobody with the retry backoff, not the check interval', async () => {
    const a = await host()
    let dials = 0
    const loop = new Bootstrapper({ host: a, addrs: [], log: silentLogger(), checkMs: 600_000, remembered: async () => { dials++; return 0 }, hasRemembered: () => true })
    loops.push(loop)
    await loop.start()
    // before: the second round came after the check interval (here ten minutes)
    await until(() => dials >= 2, 'a second round within the backoff')
  })

  it('dials the remembered peers at start although a stranger holds a connection to the node', async () => {
    const [a, stranger] = [await host(), await plainPeer()]
    await stranger.dial(a.getMultiaddrs()[0]!)
    await until(() => a.getConnections().length > 0, 'the stranger connected')
    let dials = 0
    const loop = new Bootstrapper({ host: a, addrs: [], log: silentLogger(), remembered: async () => { dials++; return 0 }, hasRemembered: () => true })
    loops.push(loop)
    await loop.start()
    // before: 0 (any connection counted, so the first round dialed no remembered peer)
    expect(dials).toBe(1)
  })

  it('goes on dialing the remembered peers while the only connection is one a stranger opened', async () => {
    const [a, stranger] = [await host(), await plainPeer()]
    let dials = 0
    const loop = new Bootstrapper({ host: a, addrs: [], log: silentLogger(), checkMs: 20, remembered: async () => { dials++; return 0 }, hasRemembered: () => true })
    loops.push(loop)
    await loop.start()
    await stranger.dial(a.getMultiaddrs()[0]!)
    await until(() => a.getConnections().length > 0, 'the stranger connected')
    const before = dials
    // before: the stranger's connection counted as held, and no round came again
    await until(() => dials >= before + 2, 'two more rounds')
    expect(loop.failedRounds).toBeGreaterThan(0)
  })

  it('backs off from a remembered peer that takes the dial and closes it again', async () => {
    const a = await host()
    let dials = 0
    // this test's dial says a peer answered, and no connection stays: as a peer that closes at once
    const loop = new Bootstrapper({ host: a, addrs: [], log: silentLogger(), checkMs: 20, remembered: async () => { dials++; return 1 }, hasRemembered: () => true })
    loops.push(loop)
    await loop.start()
    await until(() => loop.rejoined >= 3, 'three rejoins')
    // before: every check found the connection gone and dialed again at once, the wait never grew
    expect(loop.retryWaitMs).toBeGreaterThan(BOOTSTRAP_RETRY_MIN_MS)
    expect(loop.failedRounds).toBe(0)
  })

  it('counts a connection a peer of the mesh opened (it serves the DHT) as joined: a seed\'s peers dial it', async () => {
    const [seed, peer] = [await host(), await host()]
    await peer.dial(seed.getMultiaddrs()[0]!)
    await until(async () => seed.peerStore.get(peer.peerId).then(p => p.protocols.includes(DHT_PROTOCOL), () => false), 'identify to say the peer serves the DHT')
    let dials = 0
    const loop = new Bootstrapper({ host: seed, addrs: [], log: silentLogger(), remembered: async () => { dials++; return 0 }, hasRemembered: () => true })
    loops.push(loop)
    await loop.start()
    // before: only connections it opened counted, so a seed whose peers dialed it dialed its remembered peers,
    // and "rejoined" through the inbound connections they already held, for as long as it ran
    expect(dials).toBe(0)
  })

  it('stop waits for the first round\'s dials to end', async () => {
    const a = await host()
    const called = Promise.withResolvers<void>()
    const gate = Promise.withResolvers<void>()
    const loop = new Bootstrapper({ host: a, addrs: [], log: silentLogger(), remembered: async () => { called.resolve(); await gate.promise; return 0 }, hasRemembered: () => true })
    const starting = loop.start()
    await called.promise
    let stopped = false
    const stopping = loop.stop().then(() => { stopped = true })
    await new Promise<void>(resolve => { setImmediate(resolve) })
    // before: the stop returned at once, and the node went on stopping under the dials
    expect(stopped).toBe(false)
    gate.resolve()
    await stopping
    expect(await starting).toBe(0)
  })

  it('the address filter dials a remembered peer\'s loopback address for that peer only, while its round lasts', () => {
    const self = 'self'
    const filter = new AddressFilter(self, { listen: ['/ip4/203.0.113.1/tcp/4001'], localMesh: false })
    const [A, B] = ['12D3KooWAmPzZhZXEXf9rc9dq1d5E6i2Cz7ab6SmsU5Hd8SvrNjg', '12D3KooWGYrPLLpF6YhHnbDpHAgoAhJ5UwLCmvsSYVQTDSJEK6hy']
    const at = (peer: string, addr: string): ReturnType<typeof multiaddr> => multiaddr(`${addr}/p2p/${peer}`)
    expect(filter.mayDial(at(A, '/ip4/127.0.0.1/tcp/4001'))).toBe(false)
    filter.allowRemembered([{ id: A, addr: '/ip4/127.0.0.1/tcp/4001' }, { id: A, addr: '/ip4/10.0.0.1/tcp/4001' }])
    expect(filter.mayDial(at(A, '/ip4/127.0.0.1/tcp/4001'))).toBe(true)
    // another peer at that address, or another port, is no remembered dial
    expect(filter.mayDial(at(B, '/ip4/127.0.0.1/tcp/4001'))).toBe(false)
    expect(filter.mayDial(at(A, '/ip4/127.0.0.1/tcp/4002'))).toBe(false)
    // only loopback is let through this way (a private address is the filter's to judge, as always)
    expect(filter.mayDial(at(A, '/ip4/10.0.0.1/tcp/4001'))).toBe(false)
    filter.allowRemembered([])
    expect(filter.mayDial(at(A, '/ip4/127.0.0.1/tcp/4001'))).toBe(false)
  })
})
