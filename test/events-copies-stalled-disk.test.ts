/**
 * An observer whose disk stalls (its batch commits do not return, as a hung
 * disk or NFS does) went on placing gossiped events and queued a copy of each
 * in its group committer without a bound: 402 copies, 9.6 MiB, for one run of
 * 400 events (session 49's review), growing with whatever the mesh publishes
 * for as long as the stall lasts. Copies are now refused past
 * STORAGE_QUEUE_MAX_BYTES (src/storage/group-commit.ts); the run goes on being
 * delivered, and once the disk is back it is fetched again, whole, into the log.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { StallingStore } from './fixtures/stalling-datastore.ts'
import type { Datastore } from 'interface-datastore'
import type { MeshNode } from '../src/node.ts'
import { STORAGE_QUEUE_MAX_BYTES } from '../src/storage/constants.ts'
import { groupCommitter } from '../src/storage/group-commit.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import { collect, type Collector } from './events-helpers.ts'

const WORK = { capability_id: 'cap:stalled-copies', version: '1.0.0' }
const TASK = 'task-stalled-copies'
const EVENTS = 500
// 500 of these are well over twice STORAGE_QUEUE_MAX_BYTES: the stalled batch and the queue behind it
const PAYLOAD = 'x'.repeat(24 * 1024)

describe('an observer whose disk stalls', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  const store = new StallingStore()
  let onC: Collector
  const go = Promise.withResolvers<void>()

  beforeAll(async () => {
    nodes = await startMesh(3, { nodeOptions: (i) => i === 2 ? { datastore: store } : {} })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
    B.runs.handle(WORK, async (ctx) => {
      await go.promise
      for (let i = 0; i < EVENTS; i++) await ctx.progress({ step: i, pad: PAYLOAD })
      return { done: true }
    })
    await B.publishCard({ name: 'worker-b', capabilities: [WORK] })
    onC = await collect(C, TASK, { owner: A.agentId, participants: [B.agentId] })
  }, 60_000)
  afterAll(async () => {
    store.resume()
    await stopAll(nodes)
  })

  it('holds at most STORAGE_QUEUE_MAX_BYTES for the disk, still delivers, and fetches the run again once the disk is back', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    await onC.until(es => es.some(e => e.run_id === run.run_id && e.seq === 1), 'run.started at the observer')
    store.stall()
    go.resolve()
    // every event reaches the observer's subscriber while its disk takes no write
    await onC.until(es => es.some(e => e.run_id === run.run_id && e.type === 'run.completed'), 'the completion at the observer', 60_000)
    expect(onC.events.filter(e => e.run_id === run.run_id).map(e => e.seq)).toEqual(Array.from({ length: EVENTS + 2 }, (_, i) => i + 1))

    // the committer of the node's datastore (the node keeps it, under its write guard, in a private field)
    const committer = groupCommitter((C as unknown as { datastore: Datastore }).datastore)
    // copies past the bound were refused (before, every one of them waited for the disk)
    expect(C.events.stats.copyWriteErrors).toBeGreaterThan(0)
    expect(committer.refused).toBeGreaterThan(0)
    expect(committer.queuedBytes).toBeGreaterThan(0)
    expect(committer.queuedBytes).toBeLessThanOrEqual(STORAGE_QUEUE_MAX_BYTES)

    // the disk is back: what waited is written, and the refused copies are fetched again, leaving no hole
    store.resume()
    await until(async () => ((await C.events.readCorrelation(TASK)).get(run.run_id)?.length ?? 0) === EVENTS + 2, 'the observer\'s log to hold the whole run', 60_000)
    const log = (await C.events.readCorrelation(TASK)).get(run.run_id) ?? []
    expect(log.map(e => e.seq)).toEqual(Array.from({ length: EVENTS + 2 }, (_, i) => i + 1))
    expect(log.at(-1)?.type).toBe('run.completed')
    expect((await C.events.lastEvent(run.run_id))?.seq).toBe(EVENTS + 2)
    expect(committer.queuedBytes).toBe(0)
  }, 180_000)
})
