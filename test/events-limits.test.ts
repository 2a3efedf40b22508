/**
 * Housekeeping bounds: correlation topics per node, and gossipsub's per-peer
 * topic budget, which must let a peer hold every topic we allow it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  EVENTS_TOPIC_PREFIX, GOSSIP_MAX_TOPIC_BYTES_PER_PEER, GOSSIP_TOPIC_OVERHEAD_BYTES, MAX_CORRELATION_TOPICS, TASK_ID_MAX_CHARS
} from '../src/constants.ts'
import { correlationTopic } from '../src/events/topic.ts'
import type { EventSubscription } from '../src/events/subscription.ts'
import type { MeshNode } from '../src/node.ts'
import { rejectsWith, startMesh, stopAll, until } from './helpers.ts'
import { collect, expectSeqOrdered } from './events-helpers.ts'

const WORK = { capability_id: 'cap:work', version: '1.0.0' }
/** Correlation ids of the longest allowed length, so the topic budget is tested at its worst. */
const longId = (i: number): string => `limit-${i}-`.padEnd(TASK_ID_MAX_CHARS, 'x')

describe('topic bounds', () => {
  let nodes: MeshNode[] = []
  let X: MeshNode, Y: MeshNode, Z: MeshNode
  const subs: EventSubscription[] = []

  beforeAll(async () => {
    // Z delegates every run of the last test to Y: Y lets one delegator hold that many
    nodes = await startMesh(3, { bootstrapOf: () => 0, nodeOptions: () => ({ maxInboundRunsPerDelegator: MAX_CORRELATION_TOPICS }) })
    ;[X, Y, Z] = nodes as [MeshNode, MeshNode, MeshNode]
  })
  afterAll(async () => { await stopAll(nodes) })

  it('sizes the gossipsub per-peer budget for MAX_CORRELATION_TOPICS topics of the longest id', () => {
    const worst = MAX_CORRELATION_TOPICS * (EVENTS_TOPIC_PREFIX.length + TASK_ID_MAX_CHARS + GOSSIP_TOPIC_OVERHEAD_BYTES)
    expect(GOSSIP_MAX_TOPIC_BYTES_PER_PEER).toBeGreaterThanOrEqual(worst)
  })

  it('refuses an explicit subscription over MAX_CORRELATION_TOPICS with a typed error, and frees the slot on close', async () => {
    for (let i = 0; i < MAX_CORRELATION_TOPICS; i++) subs.push(await X.events.subscribe(longId(i)))
    expect(X.events.topics()).toHaveLength(MAX_CORRELATION_TOPICS)
    const err = await rejectsWith(X.events.subscribe(longId(MAX_CORRELATION_TOPICS)), 'INVALID_REQUEST')
    expect(err.details).toMatchObject({ reason: 'topic_limit', max: MAX_CORRELATION_TOPICS })
    expect(X.events.topics()).toHaveLength(MAX_CORRELATION_TOPICS)
    // a second subscriber of a correlation already followed costs no slot
    const again = await X.events.subscribe(longId(0))
    again.close()
    expect(X.events.topics()).toContain(longId(0))

    // the peer really holds all of them: none was dropped by its per-peer budget
    await until(() => Array.from({ length: MAX_CORRELATION_TOPICS }, (_v, i) => i)
      .every(i => Y.host.services.pubsub.getSubscribers(correlationTopic(longId(i))).some(p => p.toString() === X.agentId)), 'Y seeing every topic of X')

    subs.pop()!.close()
    expect(X.events.topics()).toHaveLength(MAX_CORRELATION_TOPICS - 1)
    const last = await X.events.subscribe(longId(MAX_CORRELATION_TOPICS))
    expect(X.events.topics()).toContain(longId(MAX_CORRELATION_TOPICS))
    subs.push(last)
  })

  it('keeps an executor at its limit publishing: its runs stay off gossip but subscribers still get every event', async () => {
    expect(X.events.topics()).toHaveLength(MAX_CORRELATION_TOPICS)
    X.runs.handle(WORK, async (ctx) => {
      await ctx.progress({ step: 1 })
      await ctx.progress({ step: 2 })
      return { ok: true }
    })
    await X.publishCard({ name: 'busy-worker', capabilities: [WORK] })
    const watch = await collect(Z, 'limits-over', { participants: [X.agentId] })
    await Y.delegate({ to_agent: X.agentId, task_id: 'limits-over', capability: WORK, input: {} })
    const events = await watch.until(es => es.some(e => e.type === 'run.completed'), 'the run to complete')
    expect(events.map(e => e.type)).toEqual(['run.started', 'run.progress', 'run.progress', 'run.completed'])
    expectSeqOrdered(events)
    expect(X.events.topics()).not.toContain('limits-over')
    expect(X.events.topics()).toHaveLength(MAX_CORRELATION_TOPICS)
    for (const s of subs) s.close()
    await until(() => X.events.topics().length === 0, 'X leaving every topic')
    // topics linger (EVENTS_TOPIC_LINGER_MS) and are then left together
    await until(() => X.host.services.pubsub.getTopics().length === 0, 'X leaving every topic on gossip')
  })

  it('gives an explicit subscriber the topic of a correlation kept only by runs the node delegated', async () => {
    // Z delegates MAX_CORRELATION_TOPICS runs that wait on a human: it follows each, on gossip, with no subscriber
    const WAIT = { capability_id: 'cap:wait', version: '1.0.0' }
    Y.runs.handle(WAIT, async (ctx) => { await ctx.block('waits on a human', 'cp-wait') })
    await Y.publishCard({ name: 'waiting-worker', capabilities: [WAIT] })
    const runs = []
    for (let i = 0; i < MAX_CORRELATION_TOPICS; i++) {
      runs.push(await Z.delegate({ to_agent: Y.agentId, task_id: `waiting-${i}`, capability: WAIT, input: {} }))
    }
    await until(() => Z.events.topics().length === MAX_CORRELATION_TOPICS, 'Z following every run it delegated on gossip')
    // a new subscriber (an A2A task, an event stream) is not refused: the oldest such correlation leaves gossip
    const yielded = Z.events.stats.topicsYielded
    const sub = await Z.events.subscribe('limits-new-subscriber', { participants: [X.agentId] })
    expect(Z.events.stats.topicsYielded).toBe(yielded + 1)
    expect(Z.events.topics()).toContain('limits-new-subscriber')
    expect(Z.events.topics()).toHaveLength(MAX_CORRELATION_TOPICS)
    expect(Z.events.topics()).not.toContain('waiting-0')
    // it is still followed, by the tail sync: its executor stays a participant
    expect(Z.events.participants('waiting-0')).toContain(Y.agentId)
    sub.close()
    for (const r of runs) await Z.cancel(r.run_id, 'the test is over')
  })
})
