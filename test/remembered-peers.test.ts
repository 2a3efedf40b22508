/**
 * Rejoining through peers remembered from before (src/wire/remembered-peers.ts,
 * src/wire/bootstrap.ts). A node restarted while every bootstrap peer it was
 * given is gone could not join the mesh at all. Real loopback nodes: the
 * restarted node reaches a peer it had dialed before; a peer that only dialed
 * it is not remembered; a damaged stored list is counted and left out; the
 * list keeps the most recently dialed peers up to its bound, and only
 * addresses the address filter keeps (a review found /dnsaddr names and
 * control characters kept).
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { MemoryDatastore } from 'datastore-core'
import { afterEach, describe, expect, it } from 'vitest'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { createHost, type MeshHost } from '../src/wire/host.ts'
import { addressFilterOf, allowConfigured } from '../src/wire/address-filter.ts'
import { REMEMBERED_PEERS_KEY } from '../src/wire/remembered-peers.ts'
import { REMEMBERED_PEER_ADDR_MAX_CHARS, REMEMBERED_PEER_ADDRS_MAX, REMEMBERED_PEERS_MAX, REMEMBERED_PEERS_RECORD_MAX_BYTES } from '../src/wire/network-constants.ts'
import { freePort, startLoopbackHost, until } from './helpers.ts'

const nodes: MeshNode[] = []
const hosts: MeshHost[] = []
const dirs: string[] = []
afterEach(async () => {
  await Promise.all(nodes.splice(0).map(async n => n.stop()))
  await Promise.all(hosts.splice(0).map(async h => h.stop()))
  await Promise.all(dirs.splice(0).map(async d => rm(d, { recursive: true, force: true })))
})

async function node (dataDir?: string): Promise<MeshNode> {
  const n = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, ...(dataDir === undefined ? {} : { dataDir }) })
  await n.start()
  nodes.push(n)
  return n
}

const remembers = (h: MeshHost, peer: { toString: () => string }): boolean => h.services.rememberedPeers.list().some(p => p.id === peer.toString())

describe('remembered peers', () => {
  it('a node restarted while its bootstrap peer is gone rejoins through a peer it had dialed', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-remembered-'))
    dirs.push(dir)
    const bootstrap = await node()
    const other = await node()
    const bootstrapAddrs = bootstrap.addresses
    const a = await node(dir)
    expect(await a.keepJoined(bootstrapAddrs)).toBe(1)
    expect(await a.join(other.addresses)).toBe(1)
    await until(() => remembers(a.host, other.agentId) && remembers(a.host, bootstrap.agentId), 'both peers remembered')
    await a.stop()
    nodes.splice(nodes.indexOf(a), 1)
    await bootstrap.stop()
    nodes.splice(nodes.indexOf(bootstrap), 1)

    const again = await node(dir)
    expect(again.host.services.rememberedPeers.list().map(p => p.id).sort()).toEqual([bootstrap.agentId, other.agentId].sort())
    // the bootstrap peer does not answer, and the node holds no connection: it dials the peers it remembers
    // (keepJoined counts the one that answered, so the CLI reports the node joined)
    expect(await again.keepJoined(bootstrapAddrs)).toBe(1)
    expect(again.host.getConnections(other.host.peerId).length).toBeGreaterThan(0)
    expect(again.bootstrap?.rejoined).toBe(1)
    expect(again.host.services.rememberedPeers.stats).toMatchObject({ dials: 1, reached: 1, loadFailures: 0 })
  })

  it('does not remember a peer that only dialed this node', async () => {
    const a = await startLoopbackHost()
    hosts.push(a)
    const dialer = await startLoopbackHost()
    const dialed = await startLoopbackHost()
    hosts.push(dialer, dialed)
    await dialer.dial(a.getMultiaddrs())
    await a.dial(dialed.getMultiaddrs())
    await until(() => remembers(a, dialed.peerId), 'the peer this node dialed remembered')
    // identify ran both ways on the inbound connection too
    await until(async () => (await a.peerStore.get(dialer.peerId)).protocols.length > 0, 'the dialer identified')
    expect(remembers(a, dialer.peerId)).toBe(false)
  })

  it('counts and leaves out a damaged stored list, and keeps the most recent peers up to its bound', async () => {
    const datastore = new MemoryDatastore()
    await datastore.put(REMEMBERED_PEERS_KEY, new TextEncoder().encode('{"v":1,"peers":[{"id":"not a peer id","addrs":["/ip4/127.0.0.1/tcp/1"]}'))
    const a = await createHost({ privateKey: await generateKeyPair('Ed25519'), datastore, listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, remembered: { max: 2 } })
    await a.start()
    hosts.push(a)
    expect(a.services.rememberedPeers.stats.loadFailures).toBe(1)
    expect(a.services.rememberedPeers.list()).toEqual([])
    const peers = [await startLoopbackHost(), await startLoopbackHost(), await startLoopbackHost()]
    hosts.push(...peers)
    for (const p of peers) {
      await a.dial(p.getMultiaddrs())
      await until(() => remembers(a, p.peerId), 'the dialed peer remembered')
    }
    expect(a.services.rememberedPeers.list().map(p => p.id)).toEqual([peers[2]?.peerId.toString(), peers[1]?.peerId.toString()])
    await a.stop()
    hosts.splice(hosts.indexOf(a), 1)
    // written at stop; one entry damaged in the store is left out, the other kept
    const stored = JSON.parse(new TextDecoder().decode(await datastore.get(REMEMBERED_PEERS_KEY))) as { v: number, peers: Array<{ id: string, addrs: string[] }> }
    expect(stored.peers).toHaveLength(2)
    stored.peers[0] = { id: stored.peers[0]?.id ?? '', addrs: ['not a multiaddr'] }
    await datastore.put(REMEMBERED_PEERS_KEY, new TextEncoder().encode(JSON.stringify(stored)))
    const b = await createHost({ privateKey: await generateKeyPair('Ed25519'), datastore, listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
    await b.start()
    hosts.push(b)
    expect(b.services.rememberedPeers.stats.loadFailures).toBe(1)
    expect(b.services.rememberedPeers.list().map(p => p.id)).toEqual([peers[2]?.peerId.toString()])
  })

  it('keeps only addresses the address filter keeps, in printable ASCII: no /dnsaddr name to look up, no control characters', async () => {
    const a = await startLoopbackHost()
    hosts.push(a)
    const port = await freePort()
    const at = `/ip4/127.0.0.1/tcp/${port}`
    // it announces a /dnsaddr name and a name of control characters beside the address it listens on
    const named = await createHost({
      privateKey: await generateKeyPair('Ed25519'),
      datastore: new MemoryDatastore(),
      listen: [at],
      localMesh: true,
      announce: ['/dnsaddr/evil.invalid', `/dns4/${'\u0001'.repeat(40)}/tcp/1`, at]
    })
    await named.start()
    hosts.push(named)
    // dialed at its loopback address only (a dial of what it announces would look the name up)
    await a.dial(multiaddr(`${at}/p2p/${named.peerId.toString()}`))
    await until(() => remembers(a, named.peerId), 'the dialed peer remembered')
    expect(a.services.rememberedPeers.list()).toEqual([{ id: named.peerId.toString(), addrs: [at] }])
  })

  it('on a wildcard listener, keeps no loopback address a peer announces (not dialed from there), and still the one it dialed', async () => {
    // not a local mesh: loopback addresses of strangers are kept for kad-dht but never dialed
    const a = await createHost({ privateKey: await generateKeyPair('Ed25519'), datastore: new MemoryDatastore(), listen: ['/ip4/0.0.0.0/tcp/0'] })
    await a.start()
    hosts.push(a)
    const at = `/ip4/127.0.0.1/tcp/${await freePort()}`
    const unused = `/ip4/127.0.0.1/tcp/${await freePort()}`
    const named = await createHost({ privateKey: await generateKeyPair('Ed25519'), datastore: new MemoryDatastore(), listen: [at], localMesh: true, announce: [unused, at] })
    await named.start()
    hosts.push(named)
    // the operator's address (as --bootstrap gives it): dialed although it is loopback
    allowConfigured(a.peerId, [at])
    await a.dial(multiaddr(`${at}/p2p/${named.peerId.toString()}`))
    await until(() => remembers(a, named.peerId), 'the dialed peer remembered')
    // before: the announced loopback address took the second place, and a restarted node would not dial it
    expect(a.services.rememberedPeers.list()).toEqual([{ id: named.peerId.toString(), addrs: [at] }])
  })

  it('on a wildcard listener, dials the address a remembered peer was dialed at though it is loopback (a --bootstrap address of a local mesh)', async () => {
    const at = `/ip4/127.0.0.1/tcp/${await freePort()}`
    const named = await createHost({ privateKey: await generateKeyPair('Ed25519'), datastore: new MemoryDatastore(), listen: [at], localMesh: true })
    await named.start()
    hosts.push(named)
    // the list a node restarted without --bootstrap finds: the peer it was once told to bootstrap from
    const datastore = new MemoryDatastore()
    await datastore.put(REMEMBERED_PEERS_KEY, new TextEncoder().encode(JSON.stringify({ v: 1, peers: [{ id: named.peerId.toString(), addrs: [at] }] })))
    const a = await createHost({ privateKey: await generateKeyPair('Ed25519'), datastore, listen: ['/ip4/0.0.0.0/tcp/0'] })
    await a.start()
    hosts.push(a)
    expect(a.services.rememberedPeers.list()).toEqual([{ id: named.peerId.toString(), addrs: [at] }])
    // before: 0, the dial refused by the address filter (a wildcard listener dials no loopback address it was not given)
    expect(await a.services.rememberedPeers.dial(AbortSignal.timeout(10_000))).toBe(1)
    expect(a.getConnections(named.peerId)).toHaveLength(1)
    // for that round only: the address filter refuses the address again after it
    expect(addressFilterOf(a.peerId)?.mayDial(multiaddr(`${at}/p2p/${named.peerId.toString()}`))).toBe(false)
  })

  it('on a wildcard listener, loads a stored list without the loopback addresses a peer announced (the one it was dialed at stays)', async () => {
    const datastore = new MemoryDatastore()
    const other = peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()
    // a list written before announced addresses were judged as dialable
    await datastore.put(REMEMBERED_PEERS_KEY, new TextEncoder().encode(JSON.stringify({ v: 1, peers: [{ id: other, addrs: ['/ip4/127.0.0.1/tcp/4001', '/ip4/127.0.0.1/tcp/4002'] }] })))
    const a = await createHost({ privateKey: await generateKeyPair('Ed25519'), datastore, listen: ['/ip4/0.0.0.0/tcp/0'] })
    hosts.push(a)
    expect(a.services.rememberedPeers.list()).toEqual([{ id: other, addrs: ['/ip4/127.0.0.1/tcp/4001'] }])
  })

  it('its bounds keep a stored list under the size a loaded one may have', () => {
    // each address doubled by JSON's escapes at worst, with its quotes and comma; each entry's id and keys
    const perEntry = REMEMBERED_PEER_ADDRS_MAX * (2 * REMEMBERED_PEER_ADDR_MAX_CHARS + 3) + 128
    expect(REMEMBERED_PEERS_MAX * perEntry + 32).toBeLessThan(REMEMBERED_PEERS_RECORD_MAX_BYTES)
  })

  it('filters a stored list when it loads it: addresses the address filter refuses are left out', async () => {
    const datastore = new MemoryDatastore()
    const other = peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()
    const refused = ['/dnsaddr/evil.invalid', '/ip4/169.254.169.254/tcp/80', '/ip4/10.0.0.1/tcp/1']
    const gone = peerIdFromPrivateKey(await generateKeyPair('Ed25519')).toString()
    await datastore.put(REMEMBERED_PEERS_KEY, new TextEncoder().encode(JSON.stringify({ v: 1, peers: [{ id: gone, addrs: refused }, { id: other, addrs: [...refused, '/ip4/203.0.113.7/tcp/4001'] }] })))
    // not a local mesh: private and link-local addresses are refused too
    const a = await createHost({ privateKey: await generateKeyPair('Ed25519'), datastore, listen: ['/ip4/127.0.0.1/tcp/0'] })
    hosts.push(a)
    expect(a.services.rememberedPeers.list()).toEqual([{ id: other, addrs: ['/ip4/203.0.113.7/tcp/4001'] }])
    expect(a.services.rememberedPeers.stats.loadFailures).toBe(0)
  })
})
