/**
 * Campaign part "spam": one peer floods a node in its own process (child.ts
 * target) while an honest node in a third process keeps delegating to it:
 *  1. topics: it subscribes to `topics` gossip topics (the target keeps at
 *     most GOSSIP_MAX_TOPIC_BYTES_PER_PEER of them for it);
 *  2. streams: it opens streams on every aap protocol up to and past the
 *     per-connection limit, each holding half a frame or nothing;
 *  3. gossip: it publishes `messages` junk and forged events on the topic of
 *     a correlation the target follows.
 * Figures: the target's heap after a full GC before and after (must grow less
 * than 50 MB), the topics the target tracks, the streams opened and refused,
 * the gossip verdicts, and the honest peer's delegation latency before and
 * during the floods (its failures must be 0).
 */
import { mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Stream } from '@libp2p/interface'
import { peerIdFromString } from '@libp2p/peer-id'
import {
  CARD_PROTOCOL, CONTROL_PROTOCOL, DELEGATE_PROTOCOL, DIAL_TIMEOUT_MS, EVENTS_SYNC_PROTOCOL, HANDOFF_PROTOCOL, MAX_INBOUND_STREAMS_PER_PROTOCOL
} from '../../src/constants.ts'
import { correlationTopic } from '../../src/events/topic.ts'
import { createMeshNode, type MeshNode } from '../../src/node.ts'
import { lengthPrefix } from '../../test/fixtures/raw-wire.ts'
import { besideBurner, latencyFigures, mb, prng, SPAM_TASK, startChild, type Child } from './common.ts'
import { randomJson } from './gen.ts'
import type { PartResult } from './report.ts'

const PROTOCOLS = [CARD_PROTOCOL, DELEGATE_PROTOCOL, CONTROL_PROTOCOL, HANDOFF_PROTOCOL, EVENTS_SYNC_PROTOCOL]
/** Streams tried per protocol: past the per-connection limit. */
const STREAMS_PER_PROTOCOL = MAX_INBOUND_STREAMS_PER_PROTOCOL * 2
const HEAP_GROWTH_MAX_MB = 50
/** Each flood stops at its count or after this long, whichever comes first (topics: one RPC each, about 3,000 a second here). */
const FLOOD_DEADLINE_MS = 240_000
const TOPIC_FLOOD_DEADLINE_MS = 400_000

export interface SpamOptions { topics: number, messages: number, windowMs: number, seed: number }

interface Window { latencies: number[], failures: number, errors: Record<string, number> }
interface Stats { trackedTopics: number, maxTopicsOfOnePeer: number, gossip: Record<string, number> }

const enc = new TextEncoder()

export async function runSpam (o: SpamOptions): Promise<PartResult> {
  const result: PartResult = { name: 'spam', title: 'topic, stream and gossip floods', built: true, ran: true }
  const dataDir = await mkdtemp(join(tmpdir(), 'aap-campaign-spam-'))
  let target: Child | undefined
  let honest: Child | undefined
  let spammer: MeshNode | undefined
  const held: Stream[] = []
  try {
    target = await startChild(['target', dataDir])
    const targetId = String(target.info.agentId)
    const targetAddrs = target.info.addresses as string[]
    honest = await startChild(['honest', JSON.stringify(targetAddrs), targetId])
    spammer = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
    await spammer.start()
    if (await spammer.join(targetAddrs) === 0) throw new Error('the spammer could not reach the target')
    const peer = peerIdFromString(targetId)
    const pubsub = spammer.host.services.pubsub
    const r = prng(o.seed)

    await sleep(Math.min(o.windowMs, 3_000))
    await honest.request<Window>('window')
    const heapBefore = await target.request<{ heapUsed: number, rss: number }>('heap')
    const statsBefore = await target.request<Stats>('stats')
    await sleep(o.windowMs)
    const before = await honest.request<Window>('window')
    const burn = await besideBurner(honest, o.windowMs)
    const started = performance.now()

    // 2. streams past every limit, held open with half a frame or nothing
    let opened = 0
    let refused = 0
    for (const protocol of PROTOCOLS) {
      for (let i = 0; i < STREAMS_PER_PROTOCOL; i++) {
        try {
          const s = await spammer.host.dialProtocol(peer, protocol, { signal: AbortSignal.timeout(DIAL_TIMEOUT_MS) })
          if (i % 2 === 0) s.send(lengthPrefix(1_000))
          held.push(s)
          opened++
        } catch {
          refused++ // past the limit the target refuses the stream: what this figure counts
        }
      }
    }

    // 1. topics
    const topicDeadline = Date.now() + TOPIC_FLOOD_DEADLINE_MS
    let subscribed = 0
    for (; subscribed < o.topics && Date.now() < topicDeadline; subscribed++) {
      pubsub.subscribe(`spam-topic-${subscribed}-${'x'.repeat(subscribed % 64)}`)
      if (subscribed % 1_000 === 999) await sleep(0)
    }

    // the target takes subscriptions until the spammer's topic budget is spent: wait until that settles
    let lastTracked = -1
    for (let i = 0; i < 50; i++) {
      const now = (await target.request<Stats>('stats')).trackedTopics
      if (now === lastTracked) break
      lastTracked = now
      await sleep(200)
    }

    // 3. gossip on the correlation the target follows: junk and well-shaped events of runs nobody knows
    const topic = correlationTopic(SPAM_TASK)
    pubsub.subscribe(topic)
    const gossipDeadline = Date.now() + FLOOD_DEADLINE_MS
    let published = 0
    let publishErrors = 0
    for (; published < o.messages && Date.now() < gossipDeadline; published++) {
      const body = r() < 0.5
        ? randomJson(r)
        : { run_id: `${spammer.agentId}:spam${published}`, correlation_id: SPAM_TASK, type: 'run.progress', payload: { n: published }, at: new Date().toISOString(), seq: 2 + published, prev: 'a'.repeat(64), executor: spammer.agentId, signature: 'x'.repeat(86) }
      try {
        await pubsub.publish(topic, enc.encode(JSON.stringify(body) ?? 'null'))
      } catch {
        publishErrors++ // gossipsub refusing to publish (no peers left that take it) is counted, not fatal
      }
      if (published % 200 === 199) await sleep(0)
    }
    const floodSeconds = (performance.now() - started) / 1000
    const during = await honest.request<Window>('window')
    for (const s of held.splice(0)) s.abort(new Error('spam over'))
    const statsAfter = await target.request<Stats>('stats')
    const heapAfter = await target.request<{ heapUsed: number, rss: number }>('heap')
    const crashed = target.exited === undefined ? 0 : 1
    const growth = mb(heapAfter.heapUsed - heapBefore.heapUsed)
    const verdicts = Object.entries(statsAfter.gossip).map(([k, v]) => [k, v - (statsBefore.gossip[k] ?? 0)] as const).filter(([, v]) => v > 0)
    const b = latencyFigures(before.latencies, before.failures)
    const d = latencyFigures(during.latencies, during.failures)
    const c = latencyFigures(burn.latencies, burn.failures)
    result.musts = [
      { figure: 'target crashes', value: crashed, max: 0 },
      { figure: 'target heap growth (MB)', value: Math.max(0, growth), max: HEAP_GROWTH_MAX_MB },
      { figure: 'honest calls failed during the floods', value: during.failures, max: 0 }
    ]
    result.figures = [
      ['topics subscribed by the spammer', `${subscribed} of ${o.topics}`],
      ['topics the target tracks for its peers, before → after', `${statsBefore.trackedTopics} → ${statsAfter.trackedTopics} (most for one peer: ${statsAfter.maxTopicsOfOnePeer})`],
      ['streams tried / opened / refused', `${PROTOCOLS.length * STREAMS_PER_PROTOCOL} / ${opened} / ${refused} (limit ${MAX_INBOUND_STREAMS_PER_PROTOCOL} per protocol and connection)`],
      ['gossip messages published / publish errors', `${published} / ${publishErrors}`],
      ['the target\'s gossip verdicts on them', verdicts.map(([k, v]) => `${k} ${v}`).join(', ') || 'none judged'],
      ['seconds of flooding', Math.round(floodSeconds)],
      ['target heap after GC, before → after', `${mb(heapBefore.heapUsed)} MB → ${mb(heapAfter.heapUsed)} MB (growth ${growth} MB; rss ${mb(heapBefore.rss)} → ${mb(heapAfter.rss)} MB)`],
      ['honest delegation latency before (ms)', `n ${b.n}, p50 ${b.p50}, p99 ${b.p99}, max ${b.max}, failed ${b.failures}`],
      ['honest delegation latency during (ms)', `n ${d.n}, p50 ${d.p50}, p99 ${d.p99}, max ${d.max}, failed ${d.failures}${Object.keys(during.errors).length > 0 ? ` (${JSON.stringify(during.errors)})` : ''}`],
      ['honest p50 during / before', (d.p50 / b.p50).toFixed(2)],
      ['honest delegation latency beside a process that burns one core and sends nothing (ms)', `n ${c.n}, p50 ${c.p50}, p99 ${c.p99}, max ${c.max}, failed ${c.failures}`],
      ['honest p50 and p99 during the floods / beside the burner (what the target\'s handling of the spammer adds)', `${(d.p50 / c.p50).toFixed(2)} and ${(d.p99 / c.p99).toFixed(2)}`]
    ]
    result.notes = [
      `Seed ${o.seed}; the floods run one after the other from one spammer peer, each stopping at its count or after a deadline (topics ${TOPIC_FLOOD_DEADLINE_MS / 1000} s, gossip ${FLOOD_DEADLINE_MS / 1000} s); the held streams stay open through the topic and gossip floods. Gossip the target did not judge was dropped before validation (the spammer's peer score fell: graylisting).`
    ]
  } catch (err) {
    result.error = (err as Error).stack ?? (err as Error).message
  } finally {
    for (const s of held) s.abort(new Error('spam over'))
    await spammer?.stop()
    await honest?.stop()
    await target?.stop()
  }
  return result
}

async function sleep (ms: number): Promise<void> {
  await new Promise(resolve => setTimeout(resolve, ms))
}
