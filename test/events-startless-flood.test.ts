/**
 * protocols/lineage.md, "a flood cannot lock the owner's runs out", for runs
 * whose start never comes: a stranger publishes validly signed events past
 * seq 1 under fresh run ids of its own on a task's topic. Each made a run
 * track with no lineage, which nothing evicted, so past
 * EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION every new run of the task, the
 * owner's own included, was refused (over_limit). The oldest of them now
 * make room, after refused and waiting ones.
 */
import type { PrivateKey, Stream } from '@libp2p/interface'
import { generateKeyPair } from '@libp2p/crypto/keys'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION, EVENTS_SYNC_PROTOCOL } from '../src/constants.ts'
import { correlationTopic } from '../src/events/topic.ts'
import type { MeshNode } from '../src/node.ts'
import { newRunId, signEvent } from '../src/runlog/event.ts'
import { collect, type Collector } from './events-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const WORK = { capability_id: 'cap:startless-work', version: '1.0.0' }
const TASK = 'task-startless-flood'
const enc = new TextEncoder()

describe('a flood of runs whose start never comes', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, R: MeshNode
  let rKey: PrivateKey
  let onA: Collector

  beforeAll(async () => {
    rKey = await generateKeyPair('Ed25519')
    nodes = await startMesh(3, { nodeOptions: i => i === 2 ? { privateKey: rKey } : {} })
    ;[A, B, R] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      await ctx.progress({ step: 'working' })
      return { done: ctx.run.run_id }
    })
    await B.publishCard({ name: 'worker', capabilities: [WORK] })
    onA = await collect(A, TASK, { owner: A.agentId })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('does not lock the owner\'s next run out', async () => {
    const topic = correlationTopic(TASK)
    await R.host.dial(A.host.peerId)
    await until(() => R.host.services.pubsub.getSubscribers(topic).some(p => p.equals(A.host.peerId)), 'the stranger to see the subscriber')
    const before = A.events.stats.gossip.early + A.events.stats.gossip.unknown_run + A.events.stats.gossip.over_limit
    const flood = EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION + 32
    for (let i = 0; i < flood; i++) {
      const e = await signEvent(rKey, {
        run_id: newRunId(R.agentId),
        correlation_id: TASK,
        type: 'run.progress',
        payload: { step: i },
        at: new Date().toISOString(),
        seq: 2,
        prev: 'a'.repeat(64),
        executor: R.agentId
      })
      await R.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(e)))
    }
    await until(() => A.events.stats.gossip.early + A.events.stats.gossip.unknown_run + A.events.stats.gossip.over_limit >= before + flood, 'the flood judged')
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    await onA.until(es => es.some(e => e.run_id === run.run_id && e.type === 'run.completed'), 'the owner\'s run after the flood', 30_000)
    expect(onA.events.filter(e => e.run_id === run.run_id).map(e => e.type)).toEqual(['run.started', 'run.progress', 'run.completed'])
  })

  it('does not lock the owner\'s next run out when the stranger takes every fetch of its runs and never answers', async () => {
    const task = 'task-startless-stall'
    const topic = correlationTopic(task)
    const onTask = await collect(A, task, { owner: A.agentId })
    // each startless run is fetched from its executor, S, which holds the stream and says nothing: before, a run
    // being fetched could not be forgotten, and the tail's rounds fetched them all again, so they stayed for good
    // a stranger A has never synced with (a sync stream kept from before would still be answered)
    const sKey = await generateKeyPair('Ed25519')
    const S = (await startMesh(1, { nodeOptions: () => ({ privateKey: sKey }) }))[0]!
    nodes.push(S)
    const held: Stream[] = []
    await S.host.unhandle(EVENTS_SYNC_PROTOCOL)
    await S.host.handle(EVENTS_SYNC_PROTOCOL, (stream: Stream) => { held.push(stream) }, { maxInboundStreams: 4096 })
    try {
      expect(await S.join(A.addresses)).toBe(1)
      await until(() => S.host.services.pubsub.getSubscribers(topic).some(p => p.equals(A.host.peerId)), 'the stranger to see the subscriber')
      const before = A.events.stats.gossip.early + A.events.stats.gossip.unknown_run + A.events.stats.gossip.over_limit
      const flood = EVENTS_MAX_UNPROVEN_RUNS_PER_CORRELATION + 32
      for (let i = 0; i < flood; i++) {
        const e = await signEvent(sKey, { run_id: newRunId(S.agentId), correlation_id: task, type: 'run.progress', payload: { step: i }, at: new Date().toISOString(), seq: 2, prev: 'a'.repeat(64), executor: S.agentId })
        await S.host.services.pubsub.publish(topic, enc.encode(JSON.stringify(e)))
      }
      await until(() => A.events.stats.gossip.early + A.events.stats.gossip.unknown_run + A.events.stats.gossip.over_limit >= before + flood, 'the flood judged')
      await until(() => held.length > 0, 'the stranger to take fetches of its runs')
      const run = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
      await onTask.until(es => es.some(e => e.run_id === run.run_id && e.type === 'run.completed'), 'the owner\'s run after the flood')
      expect(onTask.events.filter(e => e.run_id === run.run_id).map(e => e.type)).toEqual(['run.started', 'run.progress', 'run.completed'])
    } finally {
      for (const st of held) st.abort(new Error('test over'))
    }
  })
})
