/**
 * A delegator stops following a correlation when its runs end, but stays on
 * the topic for EVENTS_TOPIC_LINGER_MS: the topics it leaves in that window go
 * in one UNSUBSCRIBE message per peer, and a new run of the same correlation
 * takes the topic over without a new SUBSCRIBE. Events of the new run are
 * still delivered; events that come in while it lingers are ignored.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import type { SubscriptionChangeData } from '@libp2p/gossipsub'
import type { MeshNode } from '../src/node.ts'
import { correlationTopic } from '../src/events/topic.ts'
import { namedGates, startMesh, stopAll, until } from './helpers.ts'
import { collect } from './events-helpers.ts'

// a window wide beside the three runs' ends: at 100 ms, ends that a busy machine spread wider went out one by one
vi.mock('../src/constants.ts', async (orig) => ({ ...(await orig<typeof import('../src/constants.ts')>()), EVENTS_TOPIC_LINGER_MS: 2_000 }))

const WORK = { capability_id: 'cap:follow-linger', version: '1.0.0' }

describe('topics a delegator leaves', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  /** Subscription changes B saw from A, one entry per message. */
  const changes: Array<Array<{ topic: string, subscribe: boolean }>> = []
  const gates = namedGates()
  const gate = gates.get

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      if (ctx.input.gated === true) await gate(ctx.run.correlation_id).promise
      return { done: ctx.run.correlation_id }
    })
    await B.publishCard({ name: 'worker-b', capabilities: [WORK] })
    B.host.services.pubsub.addEventListener('subscription-change', (evt: CustomEvent<SubscriptionChangeData>) => {
      if (evt.detail.peerId.toString() === A.agentId) changes.push(evt.detail.subscriptions.map(s => ({ topic: s.topic, subscribe: s.subscribe })))
    })
  })
  afterAll(async () => {
    gates.openAll()
    await stopAll(nodes)
  })

  const left = (topic: string): boolean => changes.some(m => m.some(s => s.topic === topic && !s.subscribe))

  it('leaves the topics of runs that end together in one UNSUBSCRIBE message', async () => {
    const tasks = ['task-linger-a', 'task-linger-b', 'task-linger-c']
    for (const task of tasks) await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: { gated: true } })
    expect(A.events.topics()).toEqual(expect.arrayContaining(tasks))
    for (const task of tasks) gate(task).resolve()
    await until(() => tasks.every(t => left(correlationTopic(t))), 'B to see A leave all three topics')
    expect(tasks.some(t => A.events.topics().includes(t))).toBe(false)
    expect(A.host.services.pubsub.getTopics().filter(t => tasks.some(task => t === correlationTopic(task)))).toEqual([])
    // the three went out together
    const batch = changes.find(m => m.filter(s => !s.subscribe && tasks.some(t => s.topic === correlationTopic(t))).length > 1)
    expect(batch, JSON.stringify(changes)).toBeDefined()
  })

  it('takes a lingering topic over for the next run of the correlation, and still gets its events', async () => {
    const task = 'task-linger-next'
    const topic = correlationTopic(task)
    await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: {} })
    await until(() => !A.events.topics().includes(task), 'the first run to end and A to stop following it')
    const stillJoined = A.host.services.pubsub.getTopics().includes(topic)
    const second = await A.delegate({ to_agent: B.agentId, task_id: task, capability: WORK, input: { n: 2 } })
    expect(A.events.topics()).toContain(task)
    expect(A.host.services.pubsub.getTopics()).toContain(topic)
    const watch = await collect(A, task)
    await watch.until(es => es.some(e => e.run_id === second.run_id && e.type === 'run.completed'), 'the second run to complete')
    watch.sub.close()
    await until(() => left(topic), 'A to leave the topic in the end')
    const subscribes = changes.filter(m => m.some(s => s.topic === topic && s.subscribe)).length
    // a topic still joined when the second run started was taken over: one SUBSCRIBE in all
    if (stillJoined) expect(subscribes).toBe(1)
    else expect(subscribes).toBe(2)
  })
})
