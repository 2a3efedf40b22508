/**
 * A sync hands each page on as it comes (SyncCallOptions.sink), so a peer's
 * answer takes one page of memory, not SYNC_MAX_PAGES of them (about 480 MiB
 * a call, 16 calls at once): the background syncs of the events service use
 * it. Real nodes: a run of 600 events, fetched in pages of at most
 * SYNC_MAX_EVENTS_PER_RESPONSE, in order, with nothing kept for the result.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SYNC_MAX_EVENTS_PER_RESPONSE } from '../src/constants.ts'
import type { SyncClient } from '../src/events/sync.ts'
import { peerIdOfAgent } from '../src/identity/identity.ts'
import type { MeshNode } from '../src/node.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const LONG = { capability_id: 'cap:long-run', version: '1.0.0' }
const STEPS = 600
const TASK = 'task-paged-sync'

describe('syncs page by page', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  let runId = ''

  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(LONG, async (ctx) => {
      for (let i = 0; i < STEPS; i++) await ctx.progress({ step: i })
      return { steps: STEPS }
    })
    await B.publishCard({ name: 'long', capabilities: [LONG] })
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: LONG, input: {} }, { follow: false })
    runId = run.run_id
    await until(async () => (await B.runs.store.get(runId))?.state === 'completed', 'the run to complete', 60_000)
  })
  afterAll(async () => { await stopAll(nodes) })

  const syncOf = (n: MeshNode): SyncClient => (n.events as unknown as { sync: SyncClient }).sync
  const check = (pages: AgentEvent[][]): void => {
    expect(pages.length).toBeGreaterThanOrEqual(Math.ceil((STEPS + 2) / SYNC_MAX_EVENTS_PER_RESPONSE))
    for (const p of pages) expect(p.length).toBeLessThanOrEqual(SYNC_MAX_EVENTS_PER_RESPONSE)
    expect(pages.flat().map(e => e.seq)).toEqual(Array.from({ length: STEPS + 2 }, (_, i) => i + 1))
  }

  it('a correlation sync hands on each page and keeps none', async () => {
    const pages: AgentEvent[][] = []
    const kept = await syncOf(C).correlation(peerIdOfAgent(B.agentId), TASK, { sink: async (events) => { pages.push(events) } })
    expect(kept.size).toBe(0)
    check(pages)
  })

  it('a run sync hands on each page and keeps none', async () => {
    const pages: AgentEvent[][] = []
    const kept = await syncOf(C).run(peerIdOfAgent(B.agentId), runId, undefined, { sink: async (events) => { pages.push(events) } })
    expect(kept).toEqual([])
    check(pages)
  })

  it('a node that joins late gets the whole run through its background syncs', async () => {
    const seen: AgentEvent[] = []
    const done = Promise.withResolvers<void>()
    const sub = await C.events.subscribe(TASK, { owner: A.agentId, participants: [B.agentId], onEvent: (e) => { seen.push(e); if (e.type === 'run.completed') done.resolve() } })
    try {
      await done.promise
      expect(seen.filter(e => e.run_id === runId).map(e => e.seq)).toEqual(Array.from({ length: STEPS + 2 }, (_, i) => i + 1))
    } finally {
      sub.close()
    }
  })
})
