/**
 * A hostile node on a correlation topic. It is a real mesh node, connected to
 * everyone, that publishes forged, mutated, misattributed, unsigned,
 * oversized, misplaced and replayed events. Nothing it forges may be stored or
 * handed to a subscriber anywhere, forgeries must be Rejected (so they cost it
 * peer score), and the honest run must still reach everyone intact.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { EVENT_SIGNING_DOMAIN } from '../src/constants.ts'
import { eventHash, signEvent } from '../src/runlog/event.ts'
import { gossipScore } from '../src/events/service.ts'
import { correlationTopic } from '../src/events/topic.ts'
import { sign } from '../src/identity/signing.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent, UnsignedEvent } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { collect, expectSeqOrdered, hashes, type Collector } from './events-helpers.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }
const TASK = 'task-hostile-01'
const OTHER = 'task-hostile-other'
const enc = new TextEncoder()

function unsignedOf (e: AgentEvent): UnsignedEvent {
  const { signature: _s, ...rest } = e
  return rest
}

/** Sign anything, however wrong, with `key`: signEvent refuses oversized payloads, an attacker does not. */
async function rawSign (key: PrivateKey, u: UnsignedEvent): Promise<AgentEvent> {
  return { ...u, signature: await sign(key, EVENT_SIGNING_DOMAIN, u) }
}

const rejected = (n: MeshNode): number => {
  const g = n.events.stats.gossip
  return g.invalid + g.undecodable + g.wrong_correlation + g.conflict
}

describe('a hostile node publishing on a correlation topic', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, H: MeshNode
  let observers: Collector[] = []
  let hKey: PrivateKey
  let runId = ''
  let forgedCount = 0
  let resumed = false

  beforeAll(async () => {
    hKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(6, { nodeOptions: i => i === 2 ? { privateKey: hKey } : {} })
    ;[A, B, H] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(REVIEW, async (ctx) => {
      if (ctx.run.correlation_id === OTHER) return { other: true }
      await ctx.progress({ step: 1 })
      await ctx.block('waiting for a human', 'cp-hostile-1')
      return { verdict: 'fine' }
    })
    await B.publishCard({ name: 'reviewer-b', capabilities: [REVIEW] })
    observers = await Promise.all(nodes.slice(3).map(async n => collect(n, TASK, { participants: [A.agentId, B.agentId] })))
  })
  afterAll(async () => { await stopAll(nodes) })

  it('gets none of its forgeries accepted, stored or delivered, and loses peer score for them', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: REVIEW, input: {} })
    runId = run.run_id
    for (const o of observers) await o.until(es => es.some(e => e.type === 'run.blocked'), 'the block')
    const real = await B.events.readCorrelation(TASK).then(m => m.get(runId)!)
    expect(real.map(e => e.type)).toEqual(['run.started', 'run.progress', 'run.blocked'])
    const other = await A.delegate({ to_agent: B.agentId, task_id: OTHER, capability: REVIEW, input: {} })
    const otherStarted = (await B.events.readCorrelation(OTHER)).get(other.run_id)![0]!

    // the hostile node is connected to every honest node and knows which are on the topic: the
    // delegator and the observers (the executor publishes without joining, and keeps its own log)
    const topic = correlationTopic(TASK)
    expect(B.events.topics()).not.toContain(TASK)
    for (const n of nodes.filter(n => n !== H)) await H.host.dial(peerIdOfAgent(n.agentId))
    const honest = nodes.filter(n => n !== H && n !== B)
    await until(() => honest.every(n => H.host.services.pubsub.getSubscribers(topic).some(p => p.toString() === n.agentId)), 'the hostile node seeing every subscriber')

    const blocked = real[2]!
    const next: UnsignedEvent = {
      run_id: runId, correlation_id: TASK, type: 'run.progress', payload: { transition: 'resume', checkpoint_id: 'cp-hostile-1', resolution: { approved: false } },
      at: new Date().toISOString(), seq: 4, prev: eventHash(blocked), executor: B.agentId
    }
    const forged: Array<{ why: string, data: Uint8Array }> = []
    const add = (why: string, value: unknown): void => { forged.push({ why, data: enc.encode(typeof value === 'string' ? value : JSON.stringify(value)) }) }
    // someone else's run, signed with its own key, claiming to be the executor
    add('signed by the wrong key', await rawSign(hKey, next))
    // someone else's run, honestly naming itself as executor
    add('misattributed', await rawSign(hKey, { ...next, executor: H.agentId }))
    // real events, mutated after signing
    add('mutated payload', { ...real[1]!, payload: { step: 666 } })
    add('mutated seq', { ...real[1]!, seq: 7 })
    add('mutated chain', { ...real[2]!, prev: 'f'.repeat(64) })
    add('mutated correlation', { ...real[1]!, correlation_id: 'task-hostile-elsewhere' })
    // unsigned and malformed
    add('unsigned', unsignedOf({ ...real[1]!, seq: 4, prev: eventHash(blocked) }))
    add('empty signature', { ...unsignedOf(real[1]!), signature: '' })
    add('not json', 'this is not an event')
    add('json but not an event', [1, 2, 3])
    add('extra field', { ...real[1]!, extra: true })
    // a genuine event of another correlation, put on this topic (re-encoded: the delegator
    // got the original by gossip, and its content id would stop it before any validator)
    add('misplaced', Object.fromEntries(Object.entries(otherStarted).reverse()))
    // oversized: its own run, validly signed, but over the payload limit
    add('oversized', await rawSign(hKey, {
      run_id: `${H.agentId}:big`, correlation_id: TASK, type: 'run.started', payload: { blob: 'x'.repeat(40 * 1024) },
      at: new Date().toISOString(), seq: 1, prev: null, executor: H.agentId
    }))
    forgedCount = forged.length

    const pubsub = H.host.services.pubsub
    // gossipsub drops what a peer sends while their connection is still being set up, so first
    // make sure each honest node hears the hostile one: re-encoded copies of a real event (new
    // content id each, judged a duplicate: no penalty that could graylist the sender early)
    let probes = 0
    const heard = (n: MeshNode): boolean => n.events.stats.gossip.duplicate > 0
    await until(async () => {
      if (honest.every(heard)) return true
      const variant = JSON.stringify(real[0], null, 1 + (probes++ % 8)).replace('{', '{' + ' '.repeat(probes))
      await pubsub.publish(topic, enc.encode(variant))
      return false
    }, 'every honest node hearing the hostile node')
    const dupBefore = honest.map(n => n.events.stats.gossip.duplicate)
    for (const f of forged) await pubsub.publish(topic, f.data)
    // replays of real events and events of a run nobody knows: ignored, not rejected.
    // Exact copies share the original's content id and die in gossipsub's seen-cache; the same
    // events re-encoded (keys reversed) get new ids and reach the validator as duplicates.
    for (const e of real) await pubsub.publish(topic, enc.encode(JSON.stringify(e)))
    for (const e of real) await pubsub.publish(topic, enc.encode(JSON.stringify(Object.fromEntries(Object.entries(e).reverse()))))
    const stray = await signEvent(hKey, {
      run_id: `${H.agentId}:stray`, correlation_id: TASK, type: 'run.progress', payload: { noise: true },
      at: new Date().toISOString(), seq: 5, prev: 'a'.repeat(64), executor: H.agentId
    })
    await pubsub.publish(topic, enc.encode(JSON.stringify(stray)))

    // every node on the topic judged every forgery (they all got them straight from the hostile node)
    await until(() => honest.every(n => rejected(n) >= forgedCount), 'every forgery judged everywhere')
    await until(() => honest.every((n, i) => n.events.stats.gossip.duplicate >= dupBefore[i]! + real.length), 'every re-encoded replay judged everywhere')
    await until(() => honest.every(n => n.events.stats.gossip.unknown_run >= 1), 'the stray run judged everywhere')
    for (const n of honest) expect(rejected(n), `rejects on ${n.agentId}`).toBe(forgedCount)
    // P4 of the topic's score: the sender of rejected messages falls below zero (gossipsub caches a score up to a heartbeat)
    await until(() => honest.every(n => (gossipScore(n.host, H.agentId) ?? 0) < 0), 'the hostile node\'s score falling below zero everywhere')

    // the honest run goes on and completes
    await A.resume(runId, { approved: true })
    resumed = true
    for (const o of observers) await o.until(es => es.some(e => e.type === 'run.completed'), 'the completion')
  })

  it('leaves only the executor\'s own events in every log and every subscriber', async () => {
    expect(resumed).toBe(true)
    const truth = (await B.events.readCorrelation(TASK)).get(runId)!
    expect(truth.map(e => e.type)).toEqual(['run.started', 'run.progress', 'run.blocked', 'run.progress', 'run.completed'])
    expect(truth[3]!.payload).toMatchObject({ transition: 'resume', resolution: { approved: true } })
    for (const o of observers) {
      expectSeqOrdered(o.events)
      expect(hashes(o.events)).toEqual(hashes(truth))
    }
    for (const n of nodes.filter(n => n !== H)) {
      const held = await n.events.readCorrelation(TASK)
      expect([...held.keys()], `runs held by ${n.agentId}`).toEqual([runId])
      expect(hashes(held.get(runId)!)).toEqual(hashes(truth).slice(0, held.get(runId)!.length))
      if (n !== A && n !== B) expect(await n.events.readCorrelation(OTHER)).toEqual(new Map())
    }
  })
})
