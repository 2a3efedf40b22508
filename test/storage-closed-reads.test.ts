/**
 * Reads of a stopped node with a data dir fail as its writes do: INTERNAL,
 * `details.reason: closed` (src/storage/write-guard.ts closedStoreError), not
 * classic-level's own errors (GetFailedError, LEVEL_DATABASE_NOT_OPEN), for a
 * point read, a has, a query and an ordered range read (the run index).
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { refusedAsClosed } from '../src/storage/write-guard.ts'
import { nextEvent, servingNode, stopAll } from './helpers.ts'

const WORK = { capability_id: 'cap:closed-reads', version: '1.0.0' }

/** What `p` was rejected with (a test failure if it resolved). */
async function rejection (p: Promise<unknown>): Promise<unknown> {
  return p.then(() => { throw new Error('the read did not fail') }, (err: unknown) => err)
}

describe('storage: reads after the node stopped', () => {
  const dirs: string[] = []
  const nodes: MeshNode[] = []
  afterAll(async () => {
    await stopAll(nodes)
    for (const d of dirs) await rm(d, { recursive: true, force: true })
  })

  it('fail with the typed error writes fail with then (INTERNAL, closed)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-closed-reads-'))
    dirs.push(dir)
    const E = await servingNode(WORK, { dataDir: dir })
    const D = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() })
    await D.start()
    nodes.push(D)
    await D.join(E.addresses)
    const completed = nextEvent(E, e => e.type === 'run.completed' && e.correlation_id === 'task-closed-reads')
    const run = await D.delegate({ to_agent: E.agentId, task_id: 'task-closed-reads', capability: WORK, input: {} }, { follow: false })
    await completed
    expect((await E.runs.store.get(run.run_id))?.state).toBe('completed')
    const store = E.runs.store
    await E.stop()

    // a write now: the error reads are to give too
    const written = await rejection(store.closeNotice(run.run_id))
    expect(refusedAsClosed(written)).toBe(true)
    const { code, message, details } = written as { code: string, message: string, details: unknown }
    expect(details).toEqual({ store: 'datastore', reason: 'closed' })

    const reads: Array<[string, () => Promise<unknown>]> = [
      ['a run record', async () => store.get(run.run_id)],
      ['whether a run is held', async () => store.has(run.run_id)],
      ['an outgoing record', async () => store.getOutgoing(run.run_id)],
      ['a page of runs (the index)', async () => store.page({})],
      ['every run (a query)', async () => { for await (const _ of store.all()) { /* read to the end */ } }],
      ['a run\'s events', async () => store.log.read(run.run_id)],
      ['a run\'s last event', async () => store.log.head(run.run_id)]
    ]
    for (const [what, read] of reads) {
      const err = await rejection(read())
      expect({ what, err }).toMatchObject({ what, err: { code, message, details } })
      expect(refusedAsClosed(err)).toBe(true)
    }
    // the node's own verb is refused before it reads: the node is stopped (src/util/lifecycle.ts)
    expect(await rejection(E.getRun(run.run_id))).toMatchObject({ code: 'INTERNAL', details: { reason: 'node_stopped' } })
  }, 40_000)
})
