/**
 * Power-loss durability of a node with a data dir (src/storage/durability.ts):
 * the LevelDB log is synced to disk once per interval in which the run store
 * wrote something, never while nothing was written, and once more at stop.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Key } from 'interface-datastore'
import { afterAll, describe, expect, it } from 'vitest'
import { openDatastore } from '../src/identity/identity.ts'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { STORAGE_SYNC_KEY } from '../src/storage/constants.ts'
import { nextEvent, until } from './helpers.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }

describe('the run store\'s log is synced to disk', () => {
  const dirs: string[] = []
  const nodes: MeshNode[] = []
  afterAll(async () => {
    for (const n of nodes) await n.stop()
    for (const d of dirs) await rm(d, { recursive: true, force: true })
  })

  it('after runs were written, not while nothing is, and at stop; the sync marker is on disk after', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-durable-'))
    dirs.push(dir)
    const exec = await createMeshNode({ dataDir: dir, listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, storageSyncIntervalMs: 50 })
    const caller = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
    nodes.push(caller)
    await exec.start()
    await caller.start()
    // a memory datastore has no log to sync
    expect(caller.durability).toBeUndefined()
    const d = exec.durability
    if (d === undefined) throw new Error('a node with a data dir syncs its log')
    exec.runs.handle(REVIEW, async () => ({ ok: true }))
    await exec.publishCard({ name: 'durable', capabilities: [REVIEW] })
    await caller.join(exec.addresses)
    const before = d.stats.syncs
    const completed = nextEvent(exec, e => e.type === 'run.completed' && e.correlation_id === 'task-durable')
    const run = await caller.delegate({ to_agent: exec.agentId, task_id: 'task-durable', capability: REVIEW, input: {} }, { follow: false })
    expect(run.state === 'running' || run.state === 'completed').toBe(true)
    await until(() => d.stats.syncs > before, 'a sync after the run was written')
    await completed
    // nothing written since the last sync: a sync now writes nothing
    await d.sync()
    await d.sync()
    const settled = d.stats.syncs
    await d.sync()
    expect(d.stats.syncs).toBe(settled)
    expect(d.stats.failures).toBe(0)
    await exec.stop()
    // the marker the syncs write is in the store the node closed
    const ds = await openDatastore(dir)
    try {
      expect(Number(new TextDecoder().decode(await ds.get(new Key(STORAGE_SYNC_KEY))))).toBeGreaterThan(0)
    } finally {
      await ds.close?.()
    }
  })
})
