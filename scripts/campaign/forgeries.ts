/**
 * Campaign part "forgeries": forged cards, tickets, events and commands sent
 * by attackers that are real mesh nodes (libp2p on TCP 127.0.0.1, in this
 * process) against honest real nodes. A forgery is "accepted" when an honest
 * node stores it, answers it with success, delivers it, or returns it from a
 * lookup; every kind must have 0.
 *
 * - cards: DHT puts under an offline agent's key, by a DHT host that stores
 *   anything (wrong signer, mutated after signing, expired, another agent's
 *   card, and older valid cards replayed onto replicas that hold the newest);
 *   accepted = an honest replica acknowledging the put, or an honest lookup
 *   returning anything but the newest genuine card.
 * - tickets: delegations to an honest executor with tickets signed by the
 *   wrong key, stolen from the delegator, mutated after signing, replayed
 *   after their run exists, or naming another executor; accepted = a success
 *   answer.
 * - events: gossip on the correlation topic of a real (blocked, so quiet) run:
 *   signed by the wrong key, misattributed, genuine events mutated; accepted =
 *   an honest node's gossip validator accepting one, or a log that differs
 *   from the executor's.
 * - commands: cancel, resume, block and handoff of the real run from a peer
 *   that is not its delegator, and of run ids mutated from it; accepted = a
 *   success answer, or the run's log moving.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { MemoryDatastore } from 'datastore-core'
import {
  CARD_DHT_NAMESPACE, CARD_SIGNING_DOMAIN, CARD_TTL_MS, CONTROL_PROTOCOL, DELEGATE_PROTOCOL, DHT_PROTOCOL, DHT_PUT_TIMEOUT_MS, EVENT_SIGNING_DOMAIN, TICKET_SIGNING_DOMAIN
} from '../../src/constants.ts'
import { cardRecordKey, encodeCardRecord, issueCard, type AgentCard } from '../../src/card/card.ts'
import { correlationTopic } from '../../src/events/topic.ts'
import { agentIdOf, peerIdOfAgent } from '../../src/identity/identity.ts'
import { sign } from '../../src/identity/signing.ts'
import type { MeshNode } from '../../src/node.ts'
import { eventHash } from '../../src/runlog/event.ts'
import { issueDelegationTicket, type RunTicket } from '../../src/runlog/ticket.ts'
import type { AgentEvent } from '../../src/runlog/types.ts'
import { createHost, dialAddrs, type MeshHost } from '../../src/wire/host.ts'
import { rawCall } from '../../src/wire/raw.ts'
import { mutate } from '../../test/fixtures/fuzz.ts'
import { startMesh, stopAll, until } from '../../test/helpers.ts'
import { prng } from './common.ts'
import { mutateChanged, randomMutation } from './gen.ts'
import type { PartResult } from './report.ts'

const CAP = { capability_id: 'cap:campaign-forgery', version: '1.0.0' }
const TASK = 'task-campaign-forgeries'
const enc = new TextEncoder()
/** Waiting for gossip verdicts ends when none has moved for this long (bounded by VERDICT_WAIT_MS). */
const VERDICT_QUIET_MS = 1_500
const VERDICT_WAIT_MS = 30_000

export interface ForgeryOptions { perKind: number, seed: number }

type Counts = Record<string, { sent: number, accepted: number }>

function count (c: Counts, kind: string, accepted: number): void {
  const k = c[kind] ?? (c[kind] = { sent: 0, accepted: 0 })
  k.sent++
  k.accepted += accepted
}

async function signAs<T extends object> (key: PrivateKey, domain: string, unsigned: T): Promise<T & { signature: string }> {
  return { ...unsigned, signature: await sign(key, domain, unsigned) }
}

/** A DHT host that stores whatever it is given: the attacker's replica and writer. */
async function rogueDhtHost (addrs: string[]): Promise<MeshHost> {
  const host = await createHost({
    privateKey: await generateKeyPair('Ed25519'),
    datastore: new MemoryDatastore(),
    listen: ['/ip4/127.0.0.1/tcp/0'],
    localMesh: true,
    dhtValidators: { [CARD_DHT_NAMESPACE]: async () => {} },
    dhtSelectors: { [CARD_DHT_NAMESPACE]: () => 0 }
  })
  await host.start()
  if ((await dialAddrs(host, addrs)).length === 0) throw new Error('the rogue DHT host reached no node')
  return host
}

async function forgeCards (c: Counts, o: ForgeryOptions, honest: MeshNode[], attacker: PrivateKey): Promise<{ wrongLookups: number, replicaAcks: number }> {
  const rogue = await rogueDhtHost(honest.flatMap(n => n.addresses))
  try {
    await until(async () => (await rogue.peerStore.all()).filter(p => p.protocols.includes(DHT_PROTOCOL)).length >= honest.length, 'the rogue host knowing the honest DHT nodes')
    const victim = await generateKeyPair('Ed25519')
    const victimId = agentIdOf(victim)
    const honestIds = new Set(honest.map(n => n.agentId))
    const draft = { name: 'victim', capabilities: [CAP] }
    const newest = await issueCard(victim, draft, 100_000)
    // the genuine newest card reaches every honest replica through an honest node (a replica that
    // never saw it cannot know a replayed older card is stale: that case is test/card-dht.test.ts's)
    const holding = new Set<string>([honest[0]!.agentId])
    // only honest replicas count (the rogue host stores anything and acknowledges it too); a replica the
    // put's closest peers left out stores the card by putting it itself (kad-dht keeps a put locally first)
    const put = async (from: MeshNode): Promise<void> => {
      for await (const ev of from.host.services.dht.put(cardRecordKey(victimId), encodeCardRecord(newest), { signal: AbortSignal.timeout(DHT_PUT_TIMEOUT_MS) })) {
        if (ev.name === 'PEER_RESPONSE' && ev.messageName === 'PUT_VALUE' && honestIds.has(ev.from.toString())) holding.add(ev.from.toString())
      }
      holding.add(from.agentId)
    }
    await put(honest[0]!)
    for (const n of honest) if (!holding.has(n.agentId)) await put(n)
    if (honest.some(n => !holding.has(n.agentId))) throw new Error(`the genuine card reached ${holding.size} of ${honest.length} honest replicas`)
    const r = prng(o.seed)
    let replicaAcks = 0
    const { signature: _s, ...unsignedNewest } = newest
    const kinds: Array<[string, (i: number) => Promise<AgentCard | Record<string, unknown>>]> = [
      ['card: wrong signer', async i => signAs(attacker, CARD_SIGNING_DOMAIN, { ...unsignedNewest, seq: 100_001 + i })],
      ['card: mutated after signing', async () => mutateChanged(r, newest) as Record<string, unknown>],
      ['card: expired', async i => issueCard(victim, draft, 200_000 + i, Date.now() - 2 * CARD_TTL_MS)],
      ['card: another agent\'s card', async i => issueCard(attacker, draft, 300_000 + i)],
      ['card: older valid card replayed (stale seq)', async i => issueCard(victim, { ...draft, name: `victim-${i}` }, 1 + (i % 99_999))]
    ]
    for (let i = 0; i < o.perKind; i++) {
      const [kind, make] = kinds[i % kinds.length]!
      const value = encodeCardRecord(await make(i) as AgentCard)
      let acks = 0
      try {
        for await (const ev of rogue.services.dht.put(cardRecordKey(victimId), value, { signal: AbortSignal.timeout(DHT_PUT_TIMEOUT_MS) })) {
          if (ev.name === 'PEER_RESPONSE' && ev.messageName === 'PUT_VALUE' && honestIds.has(ev.from.toString())) acks++
        }
      } catch (err) {
        // the put as a whole failing (no replica took it) is the refusal this part wants
        if ((err as Error).name !== 'AbortError' && (err as Error).name !== 'QueryError') throw err
      }
      count(c, kind, acks > 0 ? 1 : 0)
      replicaAcks += acks
    }
    // every honest lookup still returns the newest genuine card
    let wrongLookups = 0
    for (const n of honest) {
      const got = await n.discovery.getCard(victimId, { fresh: true })
      if (got.seq !== newest.seq || got.signature !== newest.signature) wrongLookups++
    }
    return { wrongLookups, replicaAcks }
  } finally {
    await rogue.stop()
  }
}

async function forgeTickets (c: Counts, o: ForgeryOptions, D: MeshNode, E: MeshNode, X: MeshNode, xKey: PrivateKey, other: MeshNode): Promise<void> {
  const r = prng(o.seed + 1)
  const body = (ticket: unknown, task: string): Record<string, unknown> => ({ to_agent: E.agentId, task_id: task, capability: CAP, input: {}, parent_run: null, ticket })
  const genuine = async (task: string): Promise<RunTicket> => D.runs.ticketFor({ to_agent: E.agentId, task_id: task, capability: CAP, input: {} })
  // one ticket used for real, then replayed
  const usedTask = 'task-campaign-used'
  const used = await genuine(usedTask)
  const first = await rawCall(D.host, E.host.peerId, DELEGATE_PROTOCOL, 'delegate', body(used, usedTask))
  if (!first.ok) throw new Error(`the genuine delegation was refused: ${JSON.stringify(first.error)}`)
  const kinds: Array<[string, (i: number) => Promise<{ from: MeshNode, body: Record<string, unknown> }>]> = [
    ['ticket: wrong signer', async i => {
      const t = await genuine(`task-wrong-signer-${i}`)
      const { signature: _s, ...unsigned } = t
      return { from: X, body: body(await signAs(xKey, TICKET_SIGNING_DOMAIN, unsigned), t.correlation_id) }
    }],
    ['ticket: stolen from the delegator', async i => {
      const t = await genuine(`task-stolen-${i}`)
      return { from: X, body: body(t, t.correlation_id) }
    }],
    ['ticket: mutated after signing', async i => {
      const t = await genuine(`task-mutated-${i}`)
      const changed = mutateChanged(r, t) as RunTicket
      return { from: D, body: body(changed, t.correlation_id) }
    }],
    ['ticket: replayed after its run exists', async () => ({ from: D, body: body(used, usedTask) })],
    ['ticket: names another executor', async i => {
      const t = await issueDelegationTicket(xKey, { executor: other.agentId, correlation_id: `task-elsewhere-${i}`, capability: CAP, parent_run: null, authorized: [] })
      return { from: X, body: body(t, t.correlation_id) }
    }]
  ]
  for (let i = 0; i < o.perKind; i++) {
    const [kind, make] = kinds[i % kinds.length]!
    const { from, body: b } = await make(i)
    const answer = await rawCall(from.host, E.host.peerId, DELEGATE_PROTOCOL, 'delegate', b)
    count(c, kind, answer.ok ? 1 : 0)
  }
}

async function forgeCommands (c: Counts, o: ForgeryOptions, E: MeshNode, X: MeshNode, runId: string): Promise<void> {
  const r = prng(o.seed + 2)
  const otherRun = (): string => {
    const m = mutate({ run_id: runId }, randomMutation(r))
    const id = typeof m === 'object' && m !== null ? (m as { run_id?: unknown }).run_id : undefined
    return typeof id === 'string' && id !== runId ? id : `${runId.slice(0, -4)}${Math.floor(r() * 9999)}`
  }
  const kinds: Array<[string, () => [string, Record<string, unknown>]]> = [
    ['command: cancel by a stranger', () => ['cancel', { run_id: runId, reason: 'forged' }]],
    ['command: resume by a stranger', () => ['resume', { run_id: runId, resolution: { approved: true } }]],
    ['command: block by a stranger', () => ['block', { run_id: runId, reason: 'forged', checkpoint_id: 'cp-forged' }]],
    ['command: handoff by a stranger', () => ['handoff', { run_id: runId, to_agent: X.agentId, context: {} }]],
    ['command: on a mutated run id', () => [['cancel', 'resume'][Math.floor(r() * 2)]!, { run_id: otherRun(), resolution: {}, reason: 'forged' }]]
  ]
  for (let i = 0; i < o.perKind; i++) {
    const [kind, make] = kinds[i % kinds.length]!
    const [type, b] = make()
    const answer = await rawCall(X.host, E.host.peerId, CONTROL_PROTOCOL, type, b)
    count(c, kind, answer.ok ? 1 : 0)
  }
}

/** Sum of an honest node's gossip verdicts on events (every message its validator judged). */
function judged (n: MeshNode): number {
  return Object.values(n.events.stats.gossip).reduce((a, b) => a + b, 0)
}

async function forgeEvents (c: Counts, o: ForgeryOptions, watchers: MeshNode[], E: MeshNode, X: MeshNode, xKey: PrivateKey, runId: string): Promise<{ judged: number[], sent: number }> {
  const r = prng(o.seed + 3)
  const real = (await E.events.readCorrelation(TASK)).get(runId) ?? []
  const head = real[real.length - 1]
  if (head === undefined) throw new Error('the real run has no events')
  const topic = correlationTopic(TASK)
  for (const n of watchers) await X.host.dial(peerIdOfAgent(n.agentId), { signal: AbortSignal.timeout(5_000) })
  await until(() => watchers.every(n => X.host.services.pubsub.getSubscribers(topic).some(p => p.toString() === n.agentId)), 'the attacker seeing every subscriber')
  const pubsub = X.host.services.pubsub
  // gossipsub drops what a peer sends while the connection is set up: probe with re-encoded real events (duplicates) first
  let probes = 0
  await until(async () => {
    if (watchers.every(n => n.events.stats.gossip.duplicate > 0)) return true
    await pubsub.publish(topic, enc.encode(JSON.stringify(real[0], null, 1 + (probes++ % 8)).replace('{', '{' + ' '.repeat(probes))))
    return false
  }, 'every watcher hearing the attacker')
  const acceptedBefore = watchers.map(n => n.events.stats.gossip.accepted)
  const judgedBefore = watchers.map(judged)
  const next = { run_id: runId, correlation_id: TASK, type: 'run.progress' as const, at: new Date().toISOString(), seq: head.seq + 1, prev: eventHash(head), executor: E.agentId }
  const kinds: Array<[string, (i: number) => Promise<unknown>]> = [
    ['event: signed by the wrong key', async i => signAs(xKey, EVENT_SIGNING_DOMAIN, { ...next, payload: { forged: i } })],
    ['event: misattributed to the attacker', async i => signAs(xKey, EVENT_SIGNING_DOMAIN, { ...next, executor: X.agentId, payload: { forged: i } })],
    ['event: genuine event mutated', async i => mutateChanged(r, { ...real[i % real.length]!, at: new Date(Date.now() + i).toISOString() })],
    ['event: stale seq rewritten', async i => signAs(xKey, EVENT_SIGNING_DOMAIN, { ...real[0]!, payload: { ...real[0]!.payload, rewritten: i } })]
  ]
  let sent = 0
  for (let i = 0; i < o.perKind; i++) {
    const [kind, make] = kinds[i % kinds.length]!
    await pubsub.publish(topic, enc.encode(JSON.stringify(await make(i))))
    sent++
    count(c, kind, 0)
  }
  // wait until the watchers' verdicts stop moving (a sender that lost its score is dropped unjudged)
  let last = -1
  let quietSince = Date.now()
  const deadline = Date.now() + VERDICT_WAIT_MS
  while (Date.now() < deadline) {
    const now = watchers.reduce((a, n) => a + judged(n), 0)
    if (now !== last) { last = now; quietSince = Date.now() }
    if (Date.now() - quietSince > VERDICT_QUIET_MS) break
    await new Promise(resolve => setTimeout(resolve, 100))
  }
  const accepted = watchers.reduce((a, n, i) => a + n.events.stats.gossip.accepted - acceptedBefore[i]!, 0)
  // the run is blocked, so no genuine event was published meanwhile: every acceptance is a forgery's
  const k = c['event: accepted by a gossip validator (any kind)'] ?? (c['event: accepted by a gossip validator (any kind)'] = { sent: 0, accepted: 0 })
  k.accepted += accepted
  return { judged: watchers.map((n, i) => judged(n) - judgedBefore[i]!), sent }
}

export async function runForgeries (o: ForgeryOptions): Promise<PartResult> {
  const result: PartResult = { name: 'forgeries', title: 'forged cards, tickets, events and commands against real nodes', built: true, ran: true }
  let nodes: MeshNode[] = []
  const started = performance.now()
  try {
    const xKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(6, { transport: 'tcp', nodeOptions: i => i === 5 ? { privateKey: xKey } : {} })
    const [D, E, W1, W2, other, X] = nodes as [MeshNode, MeshNode, MeshNode, MeshNode, MeshNode, MeshNode]
    E.runs.handle(CAP, async ctx => ({ resolution: await ctx.block('waits for its delegator', 'cp-campaign-1') }))
    await E.publishCard({ name: 'executor', capabilities: [CAP] })
    const watchers = [D, W1, W2]
    const seen: AgentEvent[][] = [[], []]
    const subs = await Promise.all([W1, W2].map(async (n, i) => n.events.subscribe(TASK, { participants: [D.agentId, E.agentId], onEvent: e => { seen[i]!.push(e) } })))
    const run = await D.delegate({ to_agent: E.agentId, task_id: TASK, capability: CAP, input: {} })
    await until(async () => (await E.events.readCorrelation(TASK)).get(run.run_id)?.some(e => e.type === 'run.blocked') === true, 'the real run blocking')
    await until(() => seen.every(s => s.some(e => e.type === 'run.blocked')), 'the watchers seeing the block')
    const truthBefore = (await E.events.readCorrelation(TASK)).get(run.run_id) ?? []

    const c: Counts = {}
    const honest = nodes.filter(n => n !== X)
    const { wrongLookups, replicaAcks } = await forgeCards(c, o, honest, xKey)
    await forgeTickets(c, o, D, E, X, xKey, other)
    await forgeCommands(c, o, E, X, run.run_id)
    const ev = await forgeEvents(c, o, watchers, E, X, xKey, run.run_id)

    // nothing moved: the real run's log is what it was, on the executor and on every watcher
    const truth = (await E.events.readCorrelation(TASK)).get(run.run_id) ?? []
    let divergent = truth.length === truthBefore.length ? 0 : 1
    for (const n of watchers) {
      const held = (await n.events.readCorrelation(TASK)).get(run.run_id) ?? []
      if (held.some((e, i) => truth[i] === undefined || eventHash(e) !== eventHash(truth[i]!))) divergent++
      if ([...(await n.events.readCorrelation(TASK)).keys()].some(id => id !== run.run_id)) divergent++
    }
    for (const s of seen) if (s.some(e => !truth.some(t => eventHash(t) === eventHash(e)))) divergent++
    // and the honest flow still works: the delegator resumes, the run completes everywhere
    await D.resume(run.run_id, { approved: true })
    await until(() => seen.every(s => s.some(e => e.type === 'run.completed')), 'the real run completing at every watcher', 30_000)
    for (const s of subs) s.close()

    const sent = Object.entries(c).filter(([k]) => !k.startsWith('event: accepted')).reduce((a, [, v]) => a + v.sent, 0)
    const accepted = Object.values(c).reduce((a, v) => a + v.accepted, 0)
    result.seconds = (performance.now() - started) / 1000
    result.musts = [
      { figure: 'forgeries accepted (all kinds)', value: accepted, max: 0 },
      { figure: 'honest card lookups not returning the newest genuine card', value: wrongLookups, max: 0 },
      { figure: 'run logs or deliveries that differ from the executor\'s', value: divergent, max: 0 }
    ]
    result.figures = [
      ['forgeries sent', sent],
      ...Object.entries(c).map(([k, v]): [string, string] => [k, k.startsWith('event: accepted') ? `${v.accepted} accepted` : `${v.sent} sent, ${v.accepted} accepted`]),
      ['forged card puts acknowledged by honest replicas', replicaAcks],
      ['gossip messages judged per watcher (of those sent)', `${ev.judged.join(', ')} of ${ev.sent}`]
    ]
    result.notes = [
      `Seed ${o.seed}; 6 nodes on TCP 127.0.0.1 in one process (delegator, executor, two watchers, a bystander, the attacker) plus the attacker's DHT host that stores anything. A card put counts as accepted when at least one honest replica acknowledges it; tickets and commands when the executor answers with success; events when an honest node's gossip validator accepts one while the real run is blocked (nothing genuine is published then).`,
      'Gossip messages not judged by a watcher were dropped before validation: the attacker\'s peer score fell after its first rejected forgeries (gossipsub graylisting), which is the intended defence, not a gap.'
    ]
  } catch (err) {
    result.error = (err as Error).stack ?? (err as Error).message
  } finally {
    await stopAll(nodes)
  }
  return result
}

