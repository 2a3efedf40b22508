/**
 * The routing-table upkeep (src/wire/dht-upkeep.ts). kad-dht 16 removes a
 * contact only when a full bucket pings it, so a peer that left stayed a
 * contact, and every walk near its id dialed it again. Real loopback hosts:
 * a contact that stopped is removed after the first walk fails to reach it, and
 * the next walk does not try it; a suspect that answers its ping stays, and a
 * connected contact whose requests fail is not suspected; the table is not
 * brought below its floor; suspects past their bound are counted, not queued.
 * Two cases from a review: a removed contact is not taken back unpinged when
 * a peer still names it within DHT_CONTACT_FRESH_MS of its last connection,
 * and a suspect queued as a drain ends is still checked.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PeerId } from '@libp2p/interface'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { multiaddr } from '@multiformats/multiaddr'
import { afterEach, describe, expect, it } from 'vitest'
import { dhtRepeats, type DhtTuning, type MeshHost } from '../src/wire/host.ts'
import { startLoopbackHost, until } from './helpers.ts'
import { serveDht } from './fixtures/dht-wire.ts'

const hosts: MeshHost[] = []
afterEach(async () => { await Promise.all(hosts.splice(0).map(async h => h.stop())) })

async function host (dht?: DhtTuning): Promise<MeshHost> {
  const h = await startLoopbackHost(undefined, dht)
  hosts.push(h)
  return h
}

interface TableView { size: number, find: (peer: PeerId) => Promise<PeerId | undefined> }
const tableOf = (h: MeshHost): TableView => Reflect.get(h.services.dht, 'routingTable') as TableView
const isContact = async (h: MeshHost, peer: PeerId): Promise<boolean> => await tableOf(h).find(peer) !== undefined

/** `a` connected to each of `others`, each a contact of its routing table. */
async function contactsOf (a: MeshHost, others: MeshHost[]): Promise<void> {
  for (const o of others) await a.dial(o.getMultiaddrs())
  for (const o of others) await until(async () => isContact(a, o.peerId), 'a contact in the routing table')
}

async function stopAndWait (a: MeshHost, gone: MeshHost): Promise<void> {
  await gone.stop()
  hosts.splice(hosts.indexOf(gone), 1)
  await until(() => a.getConnections(gone.peerId).length === 0, 'the connection to the stopped peer closed')
}

/** One walk toward `target`'s id; the peers it dialed. (kad-dht's own self-query may be the walk that first fails to reach a contact.) */
async function walkDialed (a: MeshHost, target: PeerId): Promise<string[]> {
  const dialed: string[] = []
  for await (const e of a.services.dht.getClosestPeers(target.toMultihash().bytes, { signal: AbortSignal.timeout(20_000) })) {
    if (e.name === 'DIAL_PEER') dialed.push(e.peer.toString())
  }
  return dialed
}

describe('routing-table upkeep', () => {
  it('removes a contact that left once a walk fails to reach it, and the next walk does not try it', async () => {
    const a = await host({ upkeep: { tableFloor: 0 } })
    const others = [await host(), await host(), await host()]
    const [b, c, d] = others as [MeshHost, MeshHost, MeshHost]
    await contactsOf(a, others)
    await stopAndWait(a, c)
    // kad-dht kept it: nothing happens to a contact that leaves until something dials it
    expect(await isContact(a, c.peerId)).toBe(true)

    await walkDialed(a, c.peerId)
    await until(async () => !await isContact(a, c.peerId), 'the contact that left removed')
    await a.services.dhtUpkeep.settled()
    expect(a.services.dhtUpkeep.stats).toMatchObject({ checked: 1, removed: 1, kept: 0, failures: 0 })
    expect(await isContact(a, b.peerId)).toBe(true)
    expect(await isContact(a, d.peerId)).toBe(true)
    const next = await walkDialed(a, c.peerId)
    expect(next).toContain(b.peerId.toString())
    expect(next).not.toContain(c.peerId.toString())
  })

  it('keeps a suspect that answers its ping, and does not suspect a connected contact whose request failed', async () => {
    const a = await host({ upkeep: { tableFloor: 0 } })
    const b = await host()
    const c = await host()
    await contactsOf(a, [b, c])
    // c stays connected but fails every DHT request (it resets the stream): connected is alive
    await serveDht(c, (_type, _request, stream) => { stream.abort(new Error('this peer fails DHT requests')); return undefined })
    const failed: string[] = []
    for await (const e of a.services.dht.getClosestPeers(c.peerId.toMultihash().bytes, { signal: AbortSignal.timeout(20_000) })) {
      if (e.name === 'QUERY_ERROR') failed.push(e.from.toString())
    }
    expect(failed).toContain(c.peerId.toString())
    expect(a.services.dhtUpkeep.stats.checked).toBe(0)
    // b is not connected when a request to it fails (what a dial cut short leaves): its ping decides
    await a.hangUp(b.peerId)
    await until(() => a.getConnections(b.peerId).length === 0, 'the connection closed')
    a.services.dhtUpkeep.suspect(b.peerId)
    await a.services.dhtUpkeep.settled()
    expect(a.services.dhtUpkeep.stats).toMatchObject({ checked: 1, removed: 0, kept: 1 })
    expect(await isContact(a, b.peerId)).toBe(true)
    expect(await isContact(a, c.peerId)).toBe(true)
    // the ping dialed it again
    expect(a.getConnections(b.peerId).length).toBeGreaterThan(0)
  })

  it('leaves the table at its floor: a node cut off keeps where its walks start', async () => {
    const a = await host({ upkeep: { tableFloor: 2 } })
    const others = [await host(), await host()]
    const [b, c] = others as [MeshHost, MeshHost]
    await contactsOf(a, others)
    await stopAndWait(a, c)
    expect(await walkDialed(a, c.peerId)).toContain(c.peerId.toString())
    await until(() => a.services.dhtUpkeep.stats.checked > 0, 'the suspected contact checked')
    await a.services.dhtUpkeep.settled()
    // each failed walk (this one, and kad-dht's self-query when it came after the stop) suspects it again
    const { checked, atFloor, removed } = a.services.dhtUpkeep.stats
    expect({ removed, atFloor }).toEqual({ removed: 0, atFloor: checked })
    expect(await isContact(a, c.peerId)).toBe(true)
    expect(await isContact(a, b.peerId)).toBe(true)
  })

  it('queues DHT_UPKEEP_SUSPECTS_MAX suspects at most, and counts those past it', async () => {
    const a = await host({ upkeep: { suspectsMax: 2 } })
    const strangers = await Promise.all([1, 2, 3, 4, 5].map(async () => peerIdFromPrivateKey(await generateKeyPair('Ed25519'))))
    for (const p of strangers) a.services.dhtUpkeep.suspect(p)
    await a.services.dhtUpkeep.settled()
    // none is a contact, so none is checked; two waited, three were counted
    expect(a.services.dhtUpkeep.stats).toMatchObject({ checked: 0, dropped: 3 })
  })

  it('does not take a removed contact back when a peer that still knows it names it a moment later', async () => {
    const a = await host({ upkeep: { tableFloor: 0 } })
    const b = await host()
    const c = await host()
    await contactsOf(a, [b, c])
    await b.dial(c.getMultiaddrs())
    await until(async () => isContact(b, c.peerId), 'c a contact of b too')
    await stopAndWait(a, c)
    await until(() => b.getConnections(c.peerId).length === 0, 'b saw c leave')
    await walkDialed(a, c.peerId)
    await until(async () => !await isContact(a, c.peerId), 'the contact that left removed')
    await a.services.dhtUpkeep.settled()
    // b still names c; with an address a has not heard for it, so a handles the naming (not a repeat)
    await b.peerStore.merge(c.peerId, { multiaddrs: [multiaddr('/ip4/127.0.0.1/tcp/9')] })
    const unconnectedBefore = dhtRepeats(a).namedUnconnected
    const named: string[] = []
    for await (const e of a.services.dht.getClosestPeers(b.peerId.toMultihash().bytes, { signal: AbortSignal.timeout(20_000) })) {
      if (e.name === 'PEER_RESPONSE') named.push(...e.closer.map(p => p.id.toString()))
    }
    expect(named).toContain(c.peerId.toString())
    // a's connection to c closed less than DHT_CONTACT_FRESH_MS ago: without the upkeep's forget, that counted
    // as alive and c went back into the table unpinged; now c is a named peer a holds no connection to
    await until(async () => dhtRepeats(a).namedUnconnected > unconnectedBefore || await isContact(a, c.peerId), 'a judged the naming of c')
    expect(await isContact(a, c.peerId)).toBe(false)
    expect(a.services.dhtUpkeep.stats.removed).toBe(1)
  })

  it('checks a suspect queued just as a drain ends', async () => {
    const a = await host({ upkeep: { tableFloor: 0 } })
    const c = await host()
    await contactsOf(a, [c])
    await stopAndWait(a, c)
    const svc = a.services.dhtUpkeep
    // c is suspected between the end of the drain's loop and the reset of its promise (one microtask)
    const drain = Reflect.get(svc, 'drain') as () => Promise<void>
    let armed = true
    Reflect.set(svc, 'drain', () => {
      const p = Reflect.apply(drain, svc, []) as Promise<void>
      if (armed) {
        armed = false
        void p.then(() => { svc.suspect(c.peerId) })
      }
      return p
    })
    svc.suspect(peerIdFromPrivateKey(await generateKeyPair('Ed25519')))
    await svc.settled()
    expect(svc.stats).toMatchObject({ checked: 1, removed: 1 })
    expect(await isContact(a, c.peerId)).toBe(false)
  })
})
