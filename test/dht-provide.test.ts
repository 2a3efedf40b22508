/**
 * Provider records that go out whatever the walk does (src/wire/dht-provide.ts):
 * the XOR order it picks a cut walk's targets by, and a provide on a real mesh.
 */
import { createHash } from 'node:crypto'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import type { Stream } from '@libp2p/interface'
import { afterAll, describe, expect, it } from 'vitest'
import { capabilityKey } from '../src/card/card.ts'
import { DHT_PROTOCOL } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { provideKey, WalkProgress } from '../src/wire/dht-provide.ts'
import { kadInternals, kadRoutingTable } from '../src/wire/kad-internals.ts'
import { startLoneNodes, startMesh, stopAll, until, waitForRouting } from './helpers.ts'

const asBig = (b: Uint8Array): bigint => BigInt('0x' + Buffer.from(b).toString('hex'))
const digest = (b: Uint8Array): Uint8Array => createHash('sha256').update(b).digest()

/** `peers` sorted by their XOR distance to `key` (SHA-256 of each), computed with BigInt: the reference the code is checked against. */
function byDistance<T extends { toMultihash: () => { bytes: Uint8Array } }> (key: Uint8Array, peers: T[]): T[] {
  const d = (p: T): bigint => asBig(digest(key)) ^ asBig(digest(p.toMultihash().bytes))
  return [...peers].sort((a, b) => (d(a) < d(b) ? -1 : d(a) > d(b) ? 1 : 0))
}

describe('the k peers closest to a key', () => {
  it('orders by the XOR of the SHA-256 of the key and of each peer id, and keeps k', async () => {
    const self = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
    const peers = await Promise.all(Array.from({ length: 12 }, async () => peerIdFromPrivateKey(await generateKeyPair('Ed25519'))))
    const key = new TextEncoder().encode('aap/cap-any/0.1.0/cap:test')
    const expected = byDistance(key, peers).slice(0, 5)
    const walk = (k: number, answered: typeof peers): WalkProgress => {
      const w = new WalkProgress(key, k, self)
      for (const p of answered) w.answer(p)
      return w
    }
    expect(walk(5, peers).closest().map(p => p.toString())).toEqual(expected.map(p => p.toString()))
    expect(walk(50, peers).closest()).toHaveLength(12)
    expect(walk(5, []).closest()).toEqual([])
  })
})

describe('a walk that has converged', () => {
  it('has once k peers answered and every request still out is to a peer farther than the k-th of them', async () => {
    const self = peerIdFromPrivateKey(await generateKeyPair('Ed25519'))
    const peers = await Promise.all(Array.from({ length: 8 }, async () => peerIdFromPrivateKey(await generateKeyPair('Ed25519'))))
    const key = new TextEncoder().encode('aap/cap-any/0.1.0/cap:walk')
    const [p0, p1, p2, p3, p4, p5, p6, p7] = byDistance(key, peers) as [typeof self, typeof self, typeof self, typeof self, typeof self, typeof self, typeof self, typeof self]
    const walk = new WalkProgress(key, 3, self)
    for (const p of [p1, p3, p4, p6, p7, self]) walk.asked(p)
    walk.answer(p3)
    walk.answer(p4)
    walk.answer(self)
    expect(walk.converged).toBe(false) // two answered, fewer than k (this node never counts)
    walk.answer(p6)
    expect(walk.converged).toBe(false) // p1 is still out and closer than p6, the third closest that answered
    walk.failed(p1)
    expect(walk.converged).toBe(true) // only p7 is out, farther than p6
    expect(walk.closest()).toEqual([p3, p4, p6])
    // a closer peer asked later holds it again, until it answers
    walk.asked(p0)
    expect(walk.converged).toBe(false)
    walk.answer(p0)
    expect(walk.converged).toBe(true)
    expect(walk.closest()).toEqual([p0, p3, p4])
    expect([p2, p5].every(p => !walk.closest().includes(p))).toBe(true)
  })
})

describe('providing a key on a real mesh', () => {
  let nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  it('sends a record to every peer of a small mesh, and the key is found; the caller\'s own abort ends it', async () => {
    nodes = await startMesh(4)
    await waitForRouting(nodes, 3)
    // the walk starts from the routing tables, which a peer-store entry does not put a peer in: every node's
    // table holds the other three first (one CI run had a walk reach two of them)
    const anyKadId = new Uint8Array(32)
    for (const n of nodes) {
      await until(() => (kadRoutingTable(n.host.services.dht)?.closestPeers(anyKadId, { count: 20 }).length ?? 0) >= 3, 'a routing table holding the other three nodes')
    }
    const [a, , , d] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    const key = await capabilityKey('cap:provided-here')
    const outcome = await provideKey(a.host.services.dht, a.host.peerId, a.host.getMultiaddrs(), key, AbortSignal.timeout(10_000))
    expect(outcome).toMatchObject({ sent: 3, failed: 0, missed: [], walked: true, converged: false })
    expect(outcome.reached.map(String).sort()).toEqual(nodes.slice(1).map(n => n.agentId).sort())
    const found: string[] = []
    for await (const ev of d.host.services.dht.findProviders(key, { signal: AbortSignal.timeout(10_000) })) {
      if (ev.name === 'PROVIDER') found.push(...ev.providers.map(p => p.id.toString()))
      if (found.includes(a.agentId)) break
    }
    expect(found).toContain(a.agentId)
    await expect(provideKey(a.host.services.dht, a.host.peerId, a.host.getMultiaddrs(), key, AbortSignal.abort())).rejects.toThrow()
  })

  it('when a peer holds the walk past its bound, sends the records to the peers that answered, not to the silent one', async () => {
    const [a, b, c, d] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode]
    // c keeps every DHT request it is sent and never answers: a's walk cannot end before kad-dht gives up on c (5 s at least)
    const held: Stream[] = []
    let reachedSilent!: () => void
    const silentAsked = new Promise<void>(resolve => { reachedSilent = resolve })
    await c.host.handle(DHT_PROTOCOL, (stream) => { held.push(stream); reachedSilent() }, { force: true })
    try {
      const key = await capabilityKey('cap:provided-past-a-slow-peer')
      // a bound well inside the 5 s c holds the walk for, and wide beside b's and d's answers (at 300 ms a busy
      // machine could cut the walk before one of them answered)
      const outcome = await provideKey(a.host.services.dht, a.host.peerId, a.host.getMultiaddrs(), key, AbortSignal.timeout(10_000), { walkMs: 2_000 })
      await silentAsked
      expect(held.length).toBeGreaterThan(0)
      // the walk was cut; b and d answered it, so the records went to them (k is larger than the two)
      expect(outcome).toMatchObject({ sent: 2, failed: 0, missed: [], walked: false, converged: false })
      expect(outcome.reached.map(String).sort()).toEqual([b.agentId, d.agentId].sort())
      for (const holder of [b, d]) {
        const found: string[] = []
        for await (const ev of holder.host.services.dht.findProviders(key, { signal: AbortSignal.timeout(10_000) })) {
          if (ev.name === 'PROVIDER') found.push(...ev.providers.map(p => p.id.toString()))
          if (found.includes(a.agentId)) break
        }
        expect(found).toContain(a.agentId)
      }
    } finally {
      for (const s of held) s.abort(new Error('test over'))
    }
  })
})

describe('providing a key to named peers as well (a key\'s earlier holders)', () => {
  let nodes: MeshNode[] = []
  afterAll(async () => { await stopAll(nodes) })

  it('sends to each named peer once, never to itself, reaches one the walk does not, and counts those apart', async () => {
    const mesh = await startMesh(3, { transport: 'tcp' })
    const [far] = await startLoneNodes(1)
    nodes = [...mesh, far!]
    const [a, b, c] = mesh as [MeshNode, MeshNode, MeshNode]
    const anyKadId = new Uint8Array(32)
    await until(() => (kadRoutingTable(a.host.services.dht)?.closestPeers(anyKadId, { count: 20 }).length ?? 0) >= 2, 'a routing table holding the other two nodes')
    // a knows where the lone node is, as it knows a peer that once took its record; no walk meets it
    await a.host.peerStore.merge(far!.host.peerId, { multiaddrs: far!.host.getMultiaddrs() })
    const key = await capabilityKey('cap:provided-to-earlier-holders')
    const outcome = await provideKey(a.host.services.dht, a.host.peerId, a.host.getMultiaddrs(), key, AbortSignal.timeout(10_000),
      { also: [a.host.peerId, b.host.peerId, far!.host.peerId, far!.host.peerId] })
    expect(outcome).toMatchObject({ sent: 2, failed: 0, alsoSent: 1, alsoFailed: 0, missed: [] })
    expect(outcome.reached.map(String).sort()).toEqual([b.agentId, c.agentId, far!.agentId].sort())
    await until(async () => (await kadInternals(far!.host.services.dht)!.providers.getProviders(key)).some(p => p.equals(a.host.peerId)),
      'the lone node to store the record')
  })
})
