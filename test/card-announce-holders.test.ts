/**
 * Which peers a changed card's provider record goes to besides the walk's
 * own (src/card/announce.ts, src/card/key-holders.ts): the peers that took
 * the key's earlier records, for as long as they may hold them. The announcer
 * runs here against a scripted stand-in for kad-dht's walk and sends, so each
 * walk names exactly the peers a case needs; the same path on real nodes is
 * test/card-changed-old-holders.test.ts. Found by session 64's review of the
 * first version, where each case below failed.
 */
import type { PeerId } from '@libp2p/interface'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { describe, expect, it } from 'vitest'
import { Announcer } from '../src/card/announce.ts'
import { capabilityKey, issueCard, type AgentCard } from '../src/card/card.ts'
import { newDiscoveryStats } from '../src/card/discovery-stats.ts'
import { KeyHolders } from '../src/card/key-holders.ts'
import { ANNOUNCE_HOLDER_SENDS_MAX, ANNOUNCE_HOLDERS_KEPT } from '../src/card/constants.ts'
import { DHT_PROVIDER_VALIDITY_MS } from '../src/constants.ts'
import { componentLogger } from '../src/logger.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { newKey } from './card-fixtures.ts'
import { until } from './helpers.ts'

const log = componentLogger(undefined, 'test')

/**
 * What the stand-in does in one announcement: the walk's peers, the peers whose sends fail, and what hangs until the
 * announcement's end: the walk, every send, or the sends to some peers.
 */
interface Round { walk: PeerId[], fail?: PeerId[], hangWalk?: boolean, hangWalkOf?: Uint8Array, hangSends?: boolean, hangSendsTo?: PeerId[] }

async function peers (n: number): Promise<PeerId[]> {
  return Promise.all(Array.from({ length: n }, async () => peerIdFromPrivateKey(await newKey())))
}

function untilAborted (signal: AbortSignal): Promise<never> {
  return new Promise((_resolve, reject) => {
    if (signal.aborted) reject(signal.reason)
    signal.addEventListener('abort', () => { reject(signal.reason) }, { once: true })
  })
}

interface Setup {
  announcer: Announcer
  stats: ReturnType<typeof newDiscoveryStats>
  /** Announce the current card with the stand-in doing `round`; the peers sent a record. */
  next: (round: Round) => Promise<Set<string>>
  /**
   * Announce with `round`, whose walk or some sends hang, and end the announcement once everything else of it is
   * done, or once `ready` holds of the peers sent a record so far; resolves once the announcement has ended.
   */
  cut: (round: Round, ready?: (sends: Set<string>) => boolean) => Promise<void>
  publish: (version: string, capabilityId?: string) => Promise<void>
}

async function setup (k: number): Promise<Setup> {
  const key = await newKey()
  let card: AgentCard | undefined
  let seq = 0
  let round: Round = { walk: [] }
  let sends = new Set<string>()
  let hung = Promise.withResolvers<void>()
  let inFlight = 0
  let hanging = 0
  const hangs = (to: PeerId): boolean => round.hangSends === true || round.hangSendsTo?.some(p => p.equals(to)) === true
  const dht = {
    k,
    providers: { getProviders: async () => [], addProvider: async () => {} },
    network: {
      sendRequest: async function * () {},
      sendMessage: async function * (to: PeerId, _msg: unknown, options: { signal: AbortSignal }) {
        sends.add(to.toString())
        inFlight++
        try {
          if (hangs(to)) {
            hanging++
            hung.resolve()
            await untilAborted(options.signal).finally(() => { hanging-- })
          }
          if (round.fail?.some(p => p.equals(to)) === true) throw new Error('unreachable')
          yield { name: 'PEER_RESPONSE' }
        } finally {
          inFlight--
        }
      }
    },
    getClosestPeers: async function * (key: Uint8Array, options: { signal: AbortSignal }) {
      if (round.hangWalk === true || (round.hangWalkOf !== undefined && Buffer.from(key).equals(round.hangWalkOf))) {
        hung.resolve()
        await untilAborted(options.signal)
      }
      for (const id of round.walk) yield { name: 'FINAL_PEER', peer: { id } }
    },
    put: async function * () {},
    cancelReprovide: async () => {}
  }
  const host = { services: { dht }, peerId: peerIdFromPrivateKey(key), getMultiaddrs: () => [] } as unknown as MeshHost
  const stats = newDiscoveryStats()
  const announcer = new Announcer({ host, stats, log, routing: undefined, card: () => card, retryMs: 1e9 })
  const running = (): boolean => (announcer as unknown as { announcing?: unknown }).announcing !== undefined
  return {
    announcer,
    stats,
    publish: async (version, capabilityId = 'cap:moving') => {
      card = await issueCard(key, { name: 'moving', capabilities: [{ capability_id: capabilityId, version }] }, ++seq)
    },
    next: async (r) => {
      round = r
      sends = new Set()
      await announcer.announce()
      return sends
    },
    cut: async (r, ready) => {
      round = r
      sends = new Set()
      hung = Promise.withResolvers()
      const ac = new AbortController()
      const done = announcer.announce(ac.signal)
      if (ready !== undefined) {
        await until(() => ready(sends), 'the announcement to get that far before its end')
      } else {
        await hung.promise
        // every send that does not hang has ended: the cut comes after them
        await until(() => inFlight === hanging, 'the sends that do not hang to end')
      }
      ac.abort()
      expect(await done).toBe(0)
      // the announcement answers its caller at the abort; it has ended once it no longer reads the round
      await until(() => !running(), 'the cut announcement to end')
    }
  }
}

describe('a changed card\'s record and the key\'s earlier holders', () => {
  it('still reaches a holder after walks of k other peers (before: the list kept only the newest walk\'s k)', async () => {
    const p = await peers(21)
    const { announcer, next, publish } = await setup(20)
    await publish('1.0.0')
    await next({ walk: p.slice(0, 20) })
    await publish('2.0.0')
    expect(await next({ walk: p.slice(1, 21) })).toContain(p[0]!.toString())
    await publish('3.0.0')
    expect(await next({ walk: p.slice(1, 21) })).toContain(p[0]!.toString())
    announcer.stop()
  })

  it('still reaches a holder whose send once failed (it may have been busy; it still holds the record)', async () => {
    const p = await peers(4)
    const { announcer, next, publish } = await setup(3)
    await publish('1.0.0')
    await next({ walk: [p[0]!, p[1]!, p[2]!] })
    await publish('2.0.0')
    await next({ walk: [p[3]!, p[1]!, p[2]!], fail: [p[0]!] })
    await publish('3.0.0')
    expect(await next({ walk: [p[3]!, p[1]!, p[2]!] })).toContain(p[0]!.toString())
    announcer.stop()
  })

  it('keeps the holders when the announcement ends during its sends', async () => {
    const p = await peers(4)
    const { announcer, next, cut, publish } = await setup(3)
    await publish('1.0.0')
    await next({ walk: [p[0]!, p[1]!, p[2]!] })
    await publish('2.0.0')
    await cut({ walk: [p[0]!, p[1]!, p[2]!], hangSends: true })
    await publish('3.0.0')
    const sent = await next({ walk: [p[3]!] })
    for (const h of [p[0]!, p[1]!, p[2]!]) expect(sent).toContain(h.toString())
    announcer.stop()
  })

  it('sends to the holders on the next walk of the same card when the changed walk was cut before its sends', async () => {
    const p = await peers(4)
    const { announcer, next, cut, publish } = await setup(3)
    await publish('1.0.0')
    await next({ walk: [p[0]!, p[1]!, p[2]!] })
    await publish('2.0.0')
    await cut({ walk: [], hangWalk: true })
    // the same card again (its retry, or the next announcement): the draft is the one last walked
    expect(await next({ walk: [p[3]!, p[1]!, p[2]!] })).toContain(p[0]!.toString())
    announcer.stop()
  })

  it('counts only the walk\'s own peers toward a key\'s enough: a short walk is still short with holders reached', async () => {
    const p = await peers(5)
    const { announcer, next, publish, stats } = await setup(4)
    await publish('1.0.0')
    await next({ walk: p.slice(0, 4) })
    expect(stats.shortProviderWalks).toBe(0)
    await publish('2.0.0')
    // one walk peer of the two a key needs (half of k); the four earlier holders take the record too
    const sent = await next({ walk: [p[4]!] })
    expect(sent.size).toBe(5)
    expect(stats.shortProviderWalks).toBe(1)
    expect(announcer.pending).toBe(true)
    announcer.stop()
  })

  it('keeps a key short while a holder is owed the new card: a walk whose sends to the holders were cut is walked again', async () => {
    const p = await peers(5)
    const { announcer, next, cut, publish } = await setup(3)
    await publish('1.0.0')
    await next({ walk: [p[0]!, p[1]!, p[2]!] })
    await publish('2.0.0')
    // the walk's own two records went out (enough for the key); the sends to the holders were cut
    await cut({ walk: [p[3]!, p[4]!], hangSendsTo: [p[0]!, p[1]!, p[2]!] })
    const again = await next({ walk: [p[3]!, p[4]!] })
    for (const h of [p[0]!, p[1]!, p[2]!]) expect(again).toContain(h.toString())
    announcer.stop()
  })

  it(`sends the same card again to a holder whose send failed, until ${ANNOUNCE_HOLDER_SENDS_MAX} sends failed`, async () => {
    const p = await peers(4)
    const { announcer, next, publish, stats } = await setup(3)
    await publish('1.0.0')
    await next({ walk: [p[0]!, p[1]!, p[2]!] })
    await publish('2.0.0')
    await next({ walk: [p[3]!, p[1]!, p[2]!], fail: [p[0]!] })
    // the walk sent enough: not a short walk, though the key waits on p0
    expect(stats.shortProviderWalks).toBe(0)
    // the same card: p0 is still owed it
    expect(await next({ walk: [p[3]!, p[1]!, p[2]!], fail: [p[0]!] })).toContain(p[0]!.toString())
    // its second failure ends that: the key is settled, and not walked again for it
    const short = stats.shortProviderWalks
    expect(await next({ walk: [p[3]!, p[1]!, p[2]!] })).toEqual(new Set())
    expect(stats.shortProviderWalks).toBe(short)
    announcer.stop()
  })

  it('past the bound, lets the oldest earlier holders go, not the walk\'s new peers', async () => {
    const p = await peers(ANNOUNCE_HOLDERS_KEPT + 1)
    const { announcer, next, publish } = await setup(20)
    let version = 1
    for (let i = 0; i < ANNOUNCE_HOLDERS_KEPT; i += 20) {
      await publish(`${version++}.0.0`)
      await next({ walk: p.slice(i, Math.min(i + 20, ANNOUNCE_HOLDERS_KEPT)) })
    }
    // as many holders as are kept; a walk that names one new peer takes it in, and the oldest holder goes
    const newcomer = p[ANNOUNCE_HOLDERS_KEPT]!
    await publish(`${version++}.0.0`)
    await next({ walk: [newcomer] })
    await publish(`${version++}.0.0`)
    const sent = await next({ walk: [] })
    expect(sent.size).toBe(ANNOUNCE_HOLDERS_KEPT)
    expect(sent).toContain(newcomer.toString())
    expect(sent).not.toContain(p[0]!.toString())
    announcer.stop()
  })

  it('walks the new card\'s keys alongside a dropped key\'s last walk, not after it', async () => {
    const p = await peers(4)
    const { announcer, next, cut, publish } = await setup(3)
    await publish('1.0.0', 'cap:dropped')
    await next({ walk: [p[0]!, p[1]!, p[2]!] })
    await publish('1.0.0', 'cap:named-now')
    // the dropped key's last walk hangs until the announcement ends (a slow walk); the new key's walk reaches p3
    // meanwhile (before: it waited for the last walk, which could take the run's whole time)
    const dropped = (await capabilityKey('cap:dropped')).multihash.bytes
    await cut({ walk: [p[3]!], hangWalkOf: dropped }, sends => sends.has(p[3]!.toString()))
    announcer.stop()
  })

  it('keeps a dropped key whose last walk was cut: the next announcement sends its record to the key\'s holders', async () => {
    const p = await peers(4)
    const { announcer, next, cut, publish } = await setup(3)
    await publish('1.0.0', 'cap:dropped')
    await next({ walk: [p[0]!, p[1]!, p[2]!] })
    await publish('1.0.0', 'cap:named-now')
    await cut({ walk: [], hangWalk: true })
    const sent = await next({ walk: [p[3]!] })
    for (const h of [p[0]!, p[1]!, p[2]!]) expect(sent).toContain(h.toString())
    announcer.stop()
  })
})

describe('the holders of one key', () => {
  it('are kept for the record\'s validity, the newest record last, and the oldest leave past the bound', async () => {
    const p = await peers(4)
    let now = 1_000_000
    const holders = new KeyHolders(() => now, 3)
    holders.took([p[0]!, p[1]!])
    now += 1000
    holders.took([p[2]!, p[0]!])
    expect(holders.list()).toEqual([p[1]!, p[2]!, p[0]!])
    now += 1000
    holders.took([p[3]!])
    expect(holders.list()).toEqual([p[2]!, p[0]!, p[3]!])
    now += DHT_PROVIDER_VALIDITY_MS - 1
    // p2 and p0 took theirs over a validity ago: their records have expired
    expect(holders.list()).toEqual([p[3]!])
    now += 1
    expect(holders.list()).toEqual([])
    expect(holders.size).toBe(0)
  })

  it(`are owed a new card until a send to each succeeds, or ${ANNOUNCE_HOLDER_SENDS_MAX} sends to it failed`, async () => {
    const p = await peers(3)
    const holders = new KeyHolders(() => 1_000_000)
    holders.took(p)
    expect(holders.owed()).toEqual([])
    holders.owe()
    expect(holders.owed()).toEqual(p)
    holders.took([p[0]!])
    for (let i = 1; i < ANNOUNCE_HOLDER_SENDS_MAX; i++) holders.missed([p[1]!])
    expect(holders.owed()).toEqual([p[1]!, p[2]!])
    holders.missed([p[1]!])
    expect(holders.owed()).toEqual([p[2]!])
    // a peer that failed is still a holder: it keeps the earlier record
    expect(holders.list()).toHaveLength(3)
  })
})
