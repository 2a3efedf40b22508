/**
 * Campaign part "hostile-dht": lookups in a mesh where 30% of the DHT nodes
 * are hostile, beside the same lookups in an all-honest mesh of the same
 * size, in the same run. Every node is a real libp2p node on TCP 127.0.0.1 in
 * this process; the hostile ones speak the mesh's DHT protocol
 * (/aap/kad/1.0.0) in four ways:
 *  - drop: they take every DHT stream and never answer;
 *  - forge: a real kad-dht that stores anything and serves forged cards
 *    (wrong signer, mutated after signing, another agent's card under the
 *    key) and stale ones (an older valid card of the same agent) for every
 *    agent, and announces itself as a provider of the agents' capability;
 *  - eclipse: they answer every DHT request with only each other as the
 *    closer peers (no record, no providers);
 *  - flood: every DHT request is answered with honest peers it is
 *    connected to as the closer ones, and a provider lookup also with many
 *    providers that do not exist, at an address on 127.0.0.1 that takes
 *    the TCP connection and never speaks (each dial of one runs out its
 *    time).
 * (a quarter of them each).
 * Lookups, from honest nodes that are not agents, alternately:
 *  - `discover` by capability (limit 1): found when it returns a card of an
 *    honest agent;
 *  - `getCard` of an agent that is offline (its card only in the DHT):
 *    found when it returns that agent's newest genuine card.
 * Figures: lookups that found an honest agent (must be at least 99%),
 * forged cards accepted (must be 0), stale cards returned, and the lookup
 * latency in each mesh.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { Connection, PrivateKey, Stream, StreamMessageEvent } from '@libp2p/interface'
import { multiaddr } from '@multiformats/multiaddr'
import { peerIdFromPrivateKey } from '@libp2p/peer-id'
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net'
import { MemoryDatastore } from 'datastore-core'
import { cardRecordKey, encodeCardRecord, issueCard, capabilityKey, type AgentCard } from '../../src/card/card.ts'
import { CARD_DHT_NAMESPACE, CARD_SIGNING_DOMAIN, DHT_PROTOCOL, DHT_PUT_TIMEOUT_MS } from '../../src/constants.ts'
import { agentIdOf } from '../../src/identity/identity.ts'
import { sign } from '../../src/identity/signing.ts'
import { createMeshNode, type MeshNode } from '../../src/node.ts'
import { createHost, dialAddrs, type MeshHost } from '../../src/wire/host.ts'
import { closerOnly, GET_PROVIDERS, requestType, type PeerInfo } from '../../test/fixtures/dht-wire.ts'
import { sample } from '../../src/util/sample.ts'
import { until } from '../../test/helpers.ts'
import { latencyFigures, prng } from './common.ts'
import type { PartResult } from './report.ts'

export interface HostileDhtOptions { nodes: number, lookups: number, seed: number }

const CAP = { capability_id: 'cap:campaign-dht', version: '1.0.0' }
const HOSTILE_SHARE = 0.3
/** Agents with the capability that stay online / whose card is only in the DHT. */
const LIVE_AGENTS = 3
const OFFLINE_AGENTS = 3
/** Each node joins through this many earlier ones. */
const JOIN_FANOUT = 3
const LOOKUP_CONCURRENCY = 6
/** A dropper holds a stream at most this long (its victims give up long before). */
const DROP_HOLD_MS = 60_000
const MESH_READY_TIMEOUT_MS = 60_000
const FOUND_MIN_PERCENT = 99
/** A forger's own puts: long enough to store locally and reach some replicas. */
const FORGER_PUT_MS = 1_500

export type Kind = 'drop' | 'forge' | 'eclipse' | 'flood'
/** Providers that do not exist, named in each of a flooder's provider answers. */
const FLOOD_PROVIDERS = 60

interface Hostile { kind: Kind, host: MeshHost, /** DHT streams it took (drop) or answered (eclipse); provider answers (flood). */ streams: number, /** DHT requests of any type a flooder answered. */ answered: number }

interface Mesh {
  honest: MeshNode[]
  hostile: Hostile[]
  /** Non-agent honest nodes that look things up. */
  lookers: MeshNode[]
  /** Signatures of the newest genuine card of each agent, and of its older ones. */
  newest: Map<string, string>
  older: Set<string>
  liveIds: string[]
  offlineIds: string[]
  /** Where the flooders' providers point: takes connections and never speaks. */
  blackhole?: Server
}

interface Tally {
  /** Cards the honest nodes refused (forged, mutated, another agent's) while looking up. */
  rejected: number
  /** DHT streams the droppers took and the eclipsers answered, provider answers the flooders sent. */
  dropped: number
  eclipsed: number
  flooded: number
  /** DHT requests of any type (closer peers, values, providers) the flooders answered. */
  floodAnswered: number
  /** Providers the honest nodes dropped past a naming peer's share. */
  overShare: number
  lookups: number
  found: number
  forged: number
  stale: number
  errors: Record<string, number>
  latencies: number[]
  byKind: Record<string, { n: number, found: number, latencies: number[] }>
}

async function hostileHost (kind: Kind): Promise<MeshHost> {
  const host = await createHost({
    privateKey: await generateKeyPair('Ed25519'),
    datastore: new MemoryDatastore(),
    listen: ['/ip4/127.0.0.1/tcp/0'],
    localMesh: true,
    // a forger's replica keeps whatever it is given, and serves it
    ...(kind === 'forge' ? { dhtValidators: { [CARD_DHT_NAMESPACE]: async () => {} }, dhtSelectors: { [CARD_DHT_NAMESPACE]: () => 0 } } : {})
  })
  await host.start()
  return host
}

/**
 * Replace the host's DHT handler: a dropper reads and never answers, an
 * eclipser names only its colluders, a flooder also names `fakes` as the
 * providers of any key.
 */
async function subvert (h: Hostile, colluders: () => PeerInfo[], fakes: PeerInfo[]): Promise<void> {
  if (h.kind === 'forge') return
  await h.host.unhandle(DHT_PROTOCOL)
  await h.host.handle(DHT_PROTOCOL, (stream: Stream, _conn: Connection) => {
    if (h.kind !== 'flood') h.streams++
    if (h.kind === 'drop') {
      const timer = setTimeout(() => { stream.abort(new Error('dropped')) }, DROP_HOLD_MS)
      stream.addEventListener('close', () => { clearTimeout(timer) })
      return
    }
    let buf = new Uint8Array(0)
    stream.addEventListener('message', (evt: StreamMessageEvent) => {
      const data = evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()
      const next = new Uint8Array(buf.length + data.length)
      next.set(buf, 0)
      next.set(data, buf.length)
      buf = next
      const type = requestType(buf)
      if (type === undefined) return
      buf = new Uint8Array(0)
      if (h.kind === 'flood') {
        // a flooder eclipses nobody: it names the honest peers it is connected to as the closer ones
        if (type === GET_PROVIDERS) h.streams++
        h.answered++
        void honestPeers(h, colluders()).then((near) => {
          stream.send(closerOnly(type, near, type === GET_PROVIDERS ? fakes : []))
        }).catch((err: unknown) => { stream.abort(err as Error) })
        return
      }
      try {
        stream.send(closerOnly(type, colluders()))
      } catch (err) {
        stream.abort(err as Error)
      }
    })
  }, { maxInboundStreams: 1_000 })
}

async function signAs<T extends object> (key: PrivateKey, unsigned: T): Promise<T & { signature: string }> {
  return { ...unsigned, signature: await sign(key, CARD_SIGNING_DOMAIN, unsigned) }
}

async function putFrom (host: MeshHost, key: Uint8Array, value: Uint8Array, timeoutMs = DHT_PUT_TIMEOUT_MS): Promise<void> {
  try {
    for await (const ev of host.services.dht.put(key, value, { signal: AbortSignal.timeout(timeoutMs) })) { void ev }
  } catch (err) {
    // honest replicas refusing a forged record (or droppers never answering) end the put early: the record stays local
    if ((err as Error).name !== 'AbortError' && (err as Error).name !== 'QueryError' && (err as Error).name !== 'TimeoutError') throw err
  }
}

async function buildMesh (o: HostileDhtOptions, hostileCount: number, r: () => number): Promise<Mesh> {
  const honestCount = o.nodes - hostileCount
  const honest: MeshNode[] = []
  const hostile: Hostile[] = []
  const mesh: Mesh = { honest, hostile, lookers: [], newest: new Map(), older: new Set(), liveIds: [], offlineIds: [] }
  try {
    const liveKeys = await Promise.all(Array.from({ length: LIVE_AGENTS }, async () => generateKeyPair('Ed25519')))
    for (let i = 0; i < honestCount; i++) {
      const key = liveKeys[i]
      const node = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, ...(key === undefined ? {} : { privateKey: key }) })
      await node.start()
      // distinct earlier nodes: picks that repeat left a node with fewer peers than the wait below asks for, and its
      // mesh then waited on the DHT's own dials (a CI run timed out so, session 30)
      for (const peer of sample(r, honest, JOIN_FANOUT)) await node.join(peer.addresses)
      honest.push(node)
    }
    const kinds: Kind[] = ['drop', 'forge', 'eclipse', 'flood']
    for (let i = 0; i < hostileCount; i++) hostile.push({ kind: kinds[i % kinds.length]!, host: await hostileHost(kinds[i % kinds.length]!), streams: 0, answered: 0 })
    const colluders = (): PeerInfo[] => hostile.map(h => ({ id: h.host.peerId, addrs: h.host.getMultiaddrs().map(a => multiaddr(a.toString()).bytes) }))
    const fakes = hostile.some(h => h.kind === 'flood') ? await floodTargets(mesh) : []
    for (const h of hostile) {
      await subvert(h, colluders, fakes)
      // each hostile node connects to honest nodes, so it sits in their routing tables
      const targets = honest.filter(() => r() < 0.5)
      if ((await dialAddrs(h.host, targets.flatMap(n => n.addresses))).length === 0 && targets.length > 0) throw new Error('a hostile node reached no honest node')
    }
    const everyone = honest.length + hostile.length - 1
    await until(() => honest.every(n => n.host.getPeers().length >= Math.min(JOIN_FANOUT, everyone)), 'every honest node connected', MESH_READY_TIMEOUT_MS)

    // the agents: live ones publish their card (record and provider), offline ones only had theirs put once
    const draft = { name: 'dht-agent', capabilities: [CAP] }
    for (let i = 0; i < LIVE_AGENTS; i++) {
      const card = await honest[i]!.publishCard(draft)
      mesh.newest.set(card.agent_id, card.signature)
      mesh.liveIds.push(card.agent_id)
    }
    mesh.lookers = honest.slice(LIVE_AGENTS)
    const offline: Array<{ key: PrivateKey, card: AgentCard }> = []
    for (let i = 0; i < OFFLINE_AGENTS; i++) {
      const key = await generateKeyPair('Ed25519')
      const card = await issueCard(key, draft, 1_000 + i)
      mesh.newest.set(card.agent_id, card.signature)
      mesh.offlineIds.push(card.agent_id)
      offline.push({ key, card })
    }
    await Promise.all(offline.map(async ({ card }, i) => putFrom(honest[LIVE_AGENTS + i]!.host, cardRecordKey(card.agent_id), encodeCardRecord(card))))
    // the forgers' records, for every agent: stale (an older valid card) or forged
    const attacker = await generateKeyPair('Ed25519')
    const forgers = hostile.filter(h => h.kind === 'forge')
    const agentKeys = [...liveKeys.map(k => ({ key: k, id: agentIdOf(k) })), ...offline.map(x => ({ key: x.key, id: x.card.agent_id }))]
    // each forger keeps its records in its own replica at once; spreading them to honest replicas is bounded (they refuse them anyway)
    await Promise.all(forgers.map(async (f, fi) => {
      await Promise.all(agentKeys.map(async (a, ai) => {
        const variant = (fi + ai) % 3
        const stale = await issueCard(a.key, draft, 1 + ai)
        mesh.older.add(stale.signature)
        const { signature: _s, ...unsigned } = stale
        const value = variant === 0
          ? stale
          : variant === 1 ? await signAs(attacker, { ...unsigned, seq: Date.now() + 10_000_000 }) : { ...stale, name: 'mutated after signing' }
        await putFrom(f.host, cardRecordKey(a.id), encodeCardRecord(value as AgentCard), FORGER_PUT_MS)
      }))
      // a forger also announces the capability and keeps another agent's card under its own key
      await putFrom(f.host, cardRecordKey(f.host.peerId.toString()), encodeCardRecord(offline[0]!.card), FORGER_PUT_MS)
      try {
        await f.host.services.dht.provide(await capabilityKey(CAP.capability_id), { signal: AbortSignal.timeout(DHT_PUT_TIMEOUT_MS) })
      } catch (err) {
        if ((err as Error).name !== 'AbortError' && (err as Error).name !== 'TimeoutError' && (err as Error).name !== 'QueryError') throw err
      }
    }))
    return mesh
  } catch (err) {
    await stopMesh(mesh)
    throw err
  }
}

/** The peers `h` is connected to that are not `hostile`, with the addresses its peer store holds. */
async function honestPeers (h: Hostile, hostile: PeerInfo[]): Promise<PeerInfo[]> {
  const out: PeerInfo[] = []
  for (const id of h.host.getPeers()) {
    if (hostile.some(x => x.id.equals(id))) continue
    try {
      const peer = await h.host.peerStore.get(id)
      out.push({ id, addrs: peer.addresses.map(a => a.multiaddr.bytes) })
    } catch {
      // no entry (yet): not named
    }
    if (out.length >= 20) break
  }
  return out
}

/** FLOOD_PROVIDERS peer ids nobody runs, all at the address of a listener (on 127.0.0.1) that never speaks. */
async function floodTargets (m: Mesh): Promise<PeerInfo[]> {
  const sockets = new Set<Socket>()
  const server = createServer((socket) => {
    sockets.add(socket)
    socket.on('error', () => { sockets.delete(socket) })
    socket.on('close', () => { sockets.delete(socket) })
  })
  server.on('close', () => { for (const s of sockets) s.destroy() })
  m.blackhole = server
  await new Promise<void>((resolve, reject) => { server.once('error', reject); server.listen(0, '127.0.0.1', resolve) })
  const port = (server.address() as AddressInfo).port
  const addr = multiaddr(`/ip4/127.0.0.1/tcp/${port}`).bytes
  return Promise.all(Array.from({ length: FLOOD_PROVIDERS }, async () => ({ id: peerIdFromPrivateKey(await generateKeyPair('Ed25519')), addrs: [addr] })))
}

async function stopMesh (m: Mesh): Promise<void> {
  await Promise.all(m.honest.map(async n => n.stop()))
  await Promise.all(m.hostile.map(async h => h.host.stop()))
  const server = m.blackhole
  if (server !== undefined) {
    server.close()
    server.emit('close')
  }
}

async function lookups (m: Mesh, n: number, r: () => number): Promise<Tally> {
  const rejectedBefore = m.honest.reduce((n, x) => n + x.discovery.stats.rejectedCards, 0)
  const overShareBefore = m.honest.reduce((n, x) => n + x.discovery.stats.providersOverShare, 0)
  const streamsBefore = (k: Kind): number => m.hostile.filter(h => h.kind === k).reduce((n, h) => n + h.streams, 0)
  const droppedBefore = streamsBefore('drop')
  const eclipsedBefore = streamsBefore('eclipse')
  const floodedBefore = streamsBefore('flood')
  const floodAnsweredBefore = m.hostile.reduce((n, h) => n + h.answered, 0)
  const t: Tally = { rejected: 0, dropped: 0, eclipsed: 0, flooded: 0, floodAnswered: 0, overShare: 0, lookups: 0, found: 0, forged: 0, stale: 0, errors: {}, latencies: [], byKind: {} }
  const live = new Set(m.liveIds)
  const judge = (card: AgentCard): 'genuine' | 'stale' | 'forged' => {
    if (m.newest.get(card.agent_id) === card.signature) return 'genuine'
    return m.older.has(card.signature) ? 'stale' : 'forged'
  }
  let next = 0
  const one = async (i: number): Promise<void> => {
    const looker = m.lookers[Math.floor(r() * m.lookers.length)]!
    const kind = i % 2 === 0 ? 'discover by capability' : 'card of an offline agent'
    const k = t.byKind[kind] ?? (t.byKind[kind] = { n: 0, found: 0, latencies: [] })
    const t0 = performance.now()
    let found = false
    try {
      if (i % 2 === 0) {
        const cards = await looker.discover({ capability: CAP }, { limit: 1, fresh: true })
        for (const c of cards) {
          const v = judge(c)
          if (v === 'forged') t.forged++
          if (v === 'stale') t.stale++
          if (v === 'genuine' && live.has(c.agent_id)) found = true
        }
      } else {
        const id = m.offlineIds[Math.floor(r() * m.offlineIds.length)]!
        const c = await looker.getCard(id, { fresh: true })
        const v = judge(c)
        if (v === 'forged' || c.agent_id !== id) t.forged++
        if (v === 'stale') t.stale++
        found = v === 'genuine' && c.agent_id === id
      }
    } catch (err) {
      const code = (err as { code?: string }).code ?? (err as Error).name
      t.errors[code] = (t.errors[code] ?? 0) + 1
    }
    t.latencies.push(performance.now() - t0)
    k.latencies.push(performance.now() - t0)
    t.lookups++
    k.n++
    if (found) { t.found++; k.found++ }
  }
  await Promise.all(Array.from({ length: LOOKUP_CONCURRENCY }, async () => {
    while (next < n) await one(next++)
  }))
  t.rejected = m.honest.reduce((n, x) => n + x.discovery.stats.rejectedCards, 0) - rejectedBefore
  t.overShare = m.honest.reduce((n, x) => n + x.discovery.stats.providersOverShare, 0) - overShareBefore
  t.dropped = streamsBefore('drop') - droppedBefore
  t.eclipsed = streamsBefore('eclipse') - eclipsedBefore
  t.flooded = streamsBefore('flood') - floodedBefore
  t.floodAnswered = m.hostile.reduce((n, h) => n + h.answered, 0) - floodAnsweredBefore
  return t
}

/**
 * The hostile kinds present in the mesh that did nothing during the lookups:
 * a dropper that took no DHT stream, an eclipser or a flooder that answered
 * no request (its closer-peer answers fire in every run; a flooder's fake
 * providers only when a provider lookup reaches it, so those stay a figure).
 * Forgers are real kad-dht replicas and are not counted.
 */
export function idleKinds (t: Pick<Tally, 'dropped' | 'eclipsed' | 'floodAnswered'>, present: readonly Kind[]): Kind[] {
  const did: Partial<Record<Kind, number>> = { drop: t.dropped, eclipse: t.eclipsed, flood: t.floodAnswered }
  return (['drop', 'eclipse', 'flood'] as const).filter(k => present.includes(k) && (did[k] ?? 0) === 0)
}

function describe (t: Tally): string {
  const l = latencyFigures(t.latencies, t.lookups - t.found)
  return `n ${l.n}, p50 ${l.p50}, p99 ${l.p99}, max ${l.max}`
}

export async function runHostileDht (o: HostileDhtOptions): Promise<PartResult> {
  const result: PartResult = { name: 'hostile-dht', title: '30% hostile DHT nodes (drop, forge, stale, eclipse, flood)', built: true, ran: true }
  const hostileCount = Math.round(o.nodes * HOSTILE_SHARE)
  try {
    const t0 = performance.now()
    const say = (what: string): void => { console.log(`  hostile-dht: ${what} (${Math.round((performance.now() - t0) / 1000)} s)`) }
    const honestMesh = await buildMesh(o, 0, prng(o.seed))
    say('honest mesh built')
    let h: Tally
    try { h = await lookups(honestMesh, o.lookups, prng(o.seed + 1)) } finally { await stopMesh(honestMesh) }
    say('honest lookups done')
    const hostileMesh = await buildMesh(o, hostileCount, prng(o.seed))
    say('hostile mesh built')
    let x: Tally
    try { x = await lookups(hostileMesh, o.lookups, prng(o.seed + 1)) } finally { await stopMesh(hostileMesh) }
    const idle = idleKinds(x, hostileMesh.hostile.map(q => q.kind))
    const pct = (a: number, b: number): number => b === 0 ? 0 : Math.round(a / b * 10_000) / 100
    const hl = latencyFigures(h.latencies, 0)
    const xl = latencyFigures(x.latencies, 0)
    result.musts = [
      // "at least 99% found" as a figure that must stay under a bound: the share not found
      { figure: `lookups that did not find an honest agent in the hostile mesh (%; ≥ ${FOUND_MIN_PERCENT}% found)`, value: Math.round((100 - pct(x.found, x.lookups)) * 100) / 100, max: 100 - FOUND_MIN_PERCENT },
      { figure: 'forged cards accepted', value: x.forged + h.forged, max: 0 },
      { figure: 'stale cards returned', value: x.stale + h.stale, max: 0 },
      // an attack that never fired proves nothing: each kind must have acted on the lookups
      { figure: `hostile kinds that did nothing during the lookups (drop, eclipse, flood)${idle.length > 0 ? `: ${idle.join(', ')}` : ''}`, value: idle.length, max: 0 }
    ]
    result.figures = [
      ['nodes in each mesh', `${o.nodes}; hostile mesh: ${o.nodes - hostileCount} honest, ${hostileCount} hostile (${hostileMesh.hostile.filter(q => q.kind === 'drop').length} drop, ${hostileMesh.hostile.filter(q => q.kind === 'forge').length} forge and stale, ${hostileMesh.hostile.filter(q => q.kind === 'eclipse').length} eclipse, ${hostileMesh.hostile.filter(q => q.kind === 'flood').length} flood)`],
      ['agents', `${LIVE_AGENTS} online (card and provider record), ${OFFLINE_AGENTS} offline (card in the DHT only)`],
      ['lookups that found an honest agent, honest mesh', `${h.found} of ${h.lookups} (${pct(h.found, h.lookups)}%)`],
      ['lookups that found an honest agent, hostile mesh', `${x.found} of ${x.lookups} (${pct(x.found, x.lookups)}%)`],
      ...Object.entries(x.byKind).map(([k, v]): [string, string] => {
        const l = latencyFigures(v.latencies, 0)
        return [`hostile mesh, ${k}`, `${v.found} of ${v.n} found; p50 ${l.p50} ms, p99 ${l.p99} ms`]
      }),
      ['lookup errors, honest mesh / hostile mesh', `${JSON.stringify(h.errors)} / ${JSON.stringify(x.errors)}`],
      ['what the hostile nodes did during the lookups, by kind', `drop: ${x.dropped} DHT streams taken and never answered; eclipse: ${x.eclipsed} DHT requests answered with only hostile peers; flood: ${x.floodAnswered} DHT requests answered, ${x.flooded} of them provider answers naming ${FLOOD_PROVIDERS} providers that do not exist; forge: not counted (real kad-dht replicas; what they served shows as the refused cards below)`],
      ['providers dropped past their naming peer\'s share, hostile mesh', x.overShare],
      ['cards refused by discovery after the DHT\'s record validator (honest / hostile mesh)', `${h.rejected} / ${x.rejected} (forged records are refused first by the DHT's record validator at the asking node, not counted here)`],
      ['forged cards accepted (honest + hostile mesh)', h.forged + x.forged],
      ['stale cards returned (honest + hostile mesh)', h.stale + x.stale],
      ['lookup latency, honest mesh (ms)', describe(h)],
      ['lookup latency, hostile mesh (ms)', describe(x)],
      ['hostile / honest latency, p50 and p99', `${(xl.p50 / hl.p50).toFixed(2)} and ${(xl.p99 / hl.p99).toFixed(2)}`]
    ]
    result.notes = [
      `Seed ${o.seed}; both meshes in this process on TCP 127.0.0.1, one after the other, with the same agents' layout and the same lookups (${LOOKUP_CONCURRENCY} at a time, every lookup fresh: no cache). Lookups alternate between discover by capability (limit 1) and the card of an offline agent by id. Droppers take DHT streams and never answer; forgers are real kad-dht replicas that keep and serve forged and older cards of every agent, provide the capability and hold another agent's card under their own key; eclipsers answer every DHT request with only the hostile nodes as closer peers; flooders name the honest peers they are connected to as closer peers and ${FLOOD_PROVIDERS} providers that do not exist in every provider answer, at an address on 127.0.0.1 that takes connections and never speaks. A "forged" card is one no agent issued; "stale" is an agent's own older card.`
    ]
  } catch (err) {
    result.error = (err as Error).stack ?? (err as Error).message
  }
  return result
}
