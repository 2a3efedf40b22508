/**
 * The executor publishes a run's events on gossip only when some connected
 * peer takes the correlation's topic. A delegation nobody follows (runs.delegate,
 * follow: false) cost a publish per event that reached no one: the canonical
 * text, a message id, the seen cache, a send to zero peers. A delegator that
 * follows its run still gets its events by gossip, not by sync.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll, until } from './helpers.ts'

// the delegator's tail sync fetches a run still live EVENTS_TAIL_SYNC_MIN_MS after it followed it: the second case
// counts the run's events that came by gossip, and a busy machine could let a 500 ms tail fetch them first
vi.mock('../src/constants.ts', async (orig) => ({ ...(await orig<typeof import('../src/constants.ts')>()), EVENTS_TAIL_SYNC_MIN_MS: 30_000 }))

const CAP = { capability_id: 'cap:quiet', version: '1.0.0' }

describe('publishing a run\'s events when nobody takes the topic', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    B.runs.handle(CAP, async () => ({ ok: true }))
    await B.publishCard({ name: 'quiet', capabilities: [CAP] })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('does not publish the events of a run nobody follows, and says so in its stats', async () => {
    const before = { ...B.events.stats }
    const run = await A.runs.delegate({ to_agent: B.agentId, task_id: 'task-nobody', capability: CAP, input: {} })
    await until(async () => (await B.events.lastEvent(run.run_id))?.type === 'run.completed', 'the run to complete')
    expect(B.events.stats.unpublished - before.unpublished).toBe(2)
    expect(B.events.stats.published).toBe(before.published)
  })

  it('publishes the events of a run its delegator follows, which get there by gossip', async () => {
    const before = { published: B.events.stats.published, accepted: A.events.stats.gossip.accepted, runSyncs: A.events.stats.syncRequests.run }
    const run = await A.delegate({ to_agent: B.agentId, task_id: 'task-followed', capability: CAP, input: {} })
    await until(async () => (await A.events.lastEvent(run.run_id))?.type === 'run.completed', 'the delegator to hold the run\'s end')
    expect(B.events.stats.published - before.published).toBe(2)
    expect(A.events.stats.gossip.accepted - before.accepted).toBe(2)
    expect(A.events.stats.syncRequests.run).toBe(before.runSyncs)
  })
})
