/**
 * A delegator publishes the liveness verdict it signs (protocols/liveness.md)
 * on the correlation's topic only when some connected peer takes that topic,
 * as the executor does with its own events (events-publish-nobody): with the
 * executor gone, a run nobody else follows has no one to hear it, and whoever
 * subscribes later syncs the verdict from the delegator's log.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { correlationTopic } from '../src/events/topic.ts'
import type { MeshNode } from '../src/node.ts'
import { holdingWorkers, startMesh, stopAll, until } from './helpers.ts'

const GATE = { capability_id: 'cap:verdict-gate', version: '1.0.0' }

describe('publishing a liveness verdict', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const held = new Map<string, PromiseWithResolvers<void>>()

  beforeAll(async () => {
    // A delegates and declares, B executes and goes away, C follows one of the two tasks
    nodes = await startMesh(3, { nodeOptions: (i) => i === 0 ? { liveness: { lostAfterMs: 1500, probeIntervalMs: 200 } } : {} })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    await holdingWorkers([B], GATE, held)
  })
  afterAll(async () => {
    for (const g of held.values()) g.resolve()
    await stopAll(nodes)
  })

  it('goes out to the peer that follows the task, and is not published for the task nobody else follows', async () => {
    const seen: string[] = []
    const sub = await C.events.subscribe('task-verdict-followed', { onEvent: (e) => { seen.push(e.type) } })
    const followed = await A.delegate({ to_agent: B.agentId, task_id: 'task-verdict-followed', capability: GATE, input: {} })
    const alone = await A.delegate({ to_agent: B.agentId, task_id: 'task-verdict-alone', capability: GATE, input: {} })
    await until(() => held.size === 2, 'both handlers at work')
    await until(() => seen.includes('run.started'), 'C to hold the followed run\'s start')
    const topic = correlationTopic(followed.correlation_id)
    await until(() => A.host.services.pubsub.getSubscribers(topic).some(p => p.equals(C.host.peerId)), 'A to know that C takes the task\'s topic')
    await until(() => A.runs.liveness.watching.runs === 2, 'both runs watched')
    const before = { published: A.events.stats.published, unpublished: A.events.stats.unpublished }

    await B.stop()
    await until(async () => {
      for (const r of [followed, alone]) if ((await A.runs.store.getOutgoing(r.run_id))?.failure?.code !== 'EXECUTOR_LOST') return false
      return true
    }, 'the delegator to declare both runs lost', 30_000)
    await until(async () => (await A.events.lastEvent(alone.run_id))?.declared_by === A.agentId, 'the verdicts placed in A\'s log')
    await until(async () => (await A.events.lastEvent(followed.run_id))?.declared_by === A.agentId, 'the verdicts placed in A\'s log')

    expect(A.events.stats.published - before.published).toBe(1)
    expect(A.events.stats.unpublished - before.unpublished).toBe(1)
    // the follower has it by gossip
    await until(() => seen.includes('run.failed'), 'C to get the verdict')
    sub.close()
  })
})
