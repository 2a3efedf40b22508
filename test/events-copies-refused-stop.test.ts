/**
 * A node stopped (or killed) while copies of a run's events were refused
 * behind a slow disk (STORAGE_QUEUE_MAX_BYTES, copies.ts) leaves no hole in
 * the run's log. Found by session 52's review: a refused copy kept the run's
 * head, so its later, smaller copies (run.completed among them) were written
 * past the hole; the cut that repairs it comes only once the disk caught up,
 * so a stop before that left a log whose head was the run's end with events
 * missing below it, never fetched again. Now nothing more of such a run is
 * written until its log is cut and fetched again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { StallingStore } from './fixtures/stalling-datastore.ts'
import type { Datastore } from 'interface-datastore'
import type { MeshNode } from '../src/node.ts'
import { groupCommitter } from '../src/storage/group-commit.ts'
import { EventLog } from '../src/runlog/event-log.ts'
import { startMesh, stopAll, until } from './helpers.ts'
import type { CorrTrack } from '../src/events/track.ts'
import { collect, type Collector } from './events-helpers.ts'

const WORK = { capability_id: 'cap:refused-hole', version: '1.0.0' }
const TASK = 'task-refused-hole'
// run.completed lands at seq 512, a power of two that EventLog.head() gallops onto
const EVENTS = 510
const PAYLOAD = 'x'.repeat(24 * 1024)

describe('a node stopped while copies were refused', () => {
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
    await stopAll(nodes.filter(n => n !== C))
  })

  it('leaves no hole in the run\'s log on disk', async () => {
    const run = await A.delegate({ to_agent: B.agentId, task_id: TASK, capability: WORK, input: {} })
    await onC.until(es => es.some(e => e.run_id === run.run_id && e.seq === 1), 'run.started at the observer')
    store.stall()
    go.resolve()
    await onC.until(es => es.some(e => e.run_id === run.run_id && e.type === 'run.completed'), 'the completion at the observer', 60_000)
    const committer = groupCommitter((C as unknown as { datastore: Datastore }).datastore)
    expect(committer.refused).toBeGreaterThan(0)
    // the operator restarts the node (an upgrade, or the slow disk): the stop waits for the disk, which comes back
    const tracks = (C.events as unknown as { correlations: { get: (id: string) => CorrTrack | undefined } }).correlations
    const t = tracks.get(TASK)
    const stopping = C.stop()
    await until(() => t === undefined || t.closed, 'the stop to close the correlation while the disk still stalls')
    store.resume()
    await stopping
    const log = new EventLog(store)
    const head = await log.head(run.run_id)
    const read = await log.read(run.run_id, 0, 10_000)
    const seqs: number[] = []
    for (let q = 1; q <= EVENTS + 2; q++) if (await store.has(EventLog.eventKey(run.run_id, q))) seqs.push(q)
    // what the next start sees: a head (it fetches after it) that the log can read up to, and nothing past it
    expect(read.length).toBe(head?.seq ?? 0)
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1))
  }, 180_000)
})
