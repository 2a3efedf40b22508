/**
 * A node whose datastore fails writes (a full or failing disk, simulated by
 * wrapping a real datastore: test/fixtures/faulty-datastore.ts) refuses new
 * runs with STORAGE_FULL, as executor and as delegator, keeps every run it
 * acknowledged, and takes runs again once the fault clears; with LevelDB the
 * acknowledged runs are there after a restart too.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { MemoryDatastore } from 'datastore-core'
import { Key } from 'interface-datastore'
import { LevelDatastore } from 'datastore-level'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { storageWriteError } from '../src/storage/write-guard.ts'
import { FaultyDatastore } from './fixtures/faulty-datastore.ts'
import { rejectsWith, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:disk-echo', version: '1.0.0' }
const call = (): { signal: AbortSignal, follow: false } => ({ signal: AbortSignal.timeout(30_000), follow: false })

let nodes: MeshNode[] = []
let dirs: string[] = []
afterEach(async () => {
  await stopAll(nodes)
  nodes = []
  await Promise.all(dirs.map(async d => rm(d, { recursive: true, force: true })))
  dirs = []
})

async function node (opts: Parameters<typeof createMeshNode>[0] = {}): Promise<MeshNode> {
  const n = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger(), ...opts })
  await n.start()
  n.runs.handle(CAP, async (ctx) => ({ echo: ctx.input }))
  await n.publishCard({ name: 'disk', capabilities: [CAP] })
  nodes.push(n)
  return n
}

describe('disk faults', () => {
  it('types a store\'s write errors: ENOSPC is no_space, anything else write_failed, and the store\'s message stays off the wire', () => {
    const full = storageWriteError(Object.assign(new Error('IO error: /secret/dir/000001.log: No space left on device'), { code: 'ENOSPC' }))
    expect(full.code).toBe('STORAGE_FULL')
    expect(full.details).toEqual({ store: 'datastore', reason: 'no_space' })
    expect(full.message).not.toContain('/secret')
    expect(storageWriteError(new Error('IO error: bad sector')).details?.reason).toBe('write_failed')
  })

  it('refuses new runs with STORAGE_FULL while its store fails, loses no acknowledged run, and takes runs again after', async () => {
    const faulty = new FaultyDatastore(new MemoryDatastore())
    const x = await node({ datastore: faulty.store })
    const d = await node()
    expect(await d.join(x.addresses)).toBeGreaterThan(0)
    const before = await d.delegate({ to_agent: x.agentId, task_id: 'disk-1', capability: CAP, input: { n: 1 } }, call())

    // (the faults end inside the loop, so the teardown stops the node on a store that works)
    for (const mode of ['no-space', 'io'] as const) {
      faulty.mode = mode
      faulty.failing = true
      try {
      const reason = mode === 'no-space' ? 'no_space' : 'write_failed'
      // as executor: the delegator hears why, and no run was made
      const refused = await rejectsWith(d.delegate({ to_agent: x.agentId, task_id: `disk-${mode}`, capability: CAP, input: {} }, call()), 'STORAGE_FULL')
      expect(refused.details).toMatchObject({ store: 'datastore', reason })
      // as delegator: refused before anything is sent, with the same code
      await rejectsWith(x.delegate({ to_agent: d.agentId, task_id: `disk-out-${mode}`, capability: CAP, input: {} }, call()), 'STORAGE_FULL')
      expect(x.storage.failing?.reason).toBe(reason)
      // what it acknowledged is still read
      expect((await x.getRun(before.run_id)).run_id).toBe(before.run_id)
      } finally {
        faulty.failing = false
      }
    }
    expect(faulty.refused).toBeGreaterThan(0)
    const counts = (await x.runs.list({})).counts.executing
    expect(counts.running + counts.blocked + counts.completed + counts.failed).toBe(1)

    // cleared: runs are taken again, both ways
    const after = await d.delegate({ to_agent: x.agentId, task_id: 'disk-2', capability: CAP, input: { n: 2 } }, call())
    expect(after.agent_id).toBe(x.agentId)
    await x.delegate({ to_agent: d.agentId, task_id: 'disk-out-2', capability: CAP, input: {} }, call())
    expect(x.storage.failing).toBeUndefined()
  })

  it('keeps every run acknowledged before a fault across a restart on the same LevelDB', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'aap-disk-test-'))
    dirs.push(dataDir)
    const storeDir = join(dataDir, 'store')
    const level = new LevelDatastore(storeDir)
    await level.open()
    const faulty = new FaultyDatastore(level)
    const x = await node({ dataDir, datastore: faulty.store })
    const d = await node()
    expect(await d.join(x.addresses)).toBeGreaterThan(0)
    const acked: string[] = []
    for (let i = 0; i < 5; i++) acked.push((await d.delegate({ to_agent: x.agentId, task_id: `disk-r${i}`, capability: CAP, input: { i } }, call())).run_id)
    faulty.failing = true
    try {
      await rejectsWith(d.delegate({ to_agent: x.agentId, task_id: 'disk-refused', capability: CAP, input: {} }, call()), 'STORAGE_FULL')
    } finally {
      faulty.failing = false
    }
    await x.stop()
    nodes = nodes.filter(n => n !== x)
    await level.close()

    const reopened = new LevelDatastore(storeDir)
    await reopened.open()
    try {
      const y = await node({ dataDir, datastore: reopened })
      expect(y.agentId).toBe(x.agentId)
      for (const runId of acked) expect((await y.getRun(runId)).run_id).toBe(runId)
      const counts = (await y.runs.list({})).counts.executing
      expect(counts.running + counts.blocked + counts.completed + counts.failed).toBe(acked.length)
      await y.stop()
      nodes = nodes.filter(n => n !== y)
    } finally {
      await reopened.close()
    }
  })

  it('starts again on a disk that refuses every write, answers for the runs it acknowledged, and takes new runs once it has room', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'aap-disk-test-'))
    dirs.push(dataDir)
    const level = new LevelDatastore(join(dataDir, 'store'))
    await level.open()
    try {
      const faulty = new FaultyDatastore(level)
      const x = await node({ dataDir, datastore: faulty.store })
      const d = await node()
      expect(await d.join(x.addresses)).toBeGreaterThan(0)
      const acked = await d.delegate({ to_agent: x.agentId, task_id: 'disk-full-restart', capability: CAP, input: { n: 1 } }, call())
      // the disk fills up, and the node is restarted on it
      faulty.failing = true
      await x.stop()
      nodes = nodes.filter(n => n !== x)
      const refusedBefore = faulty.refused
      const y = await createMeshNode({ dataDir, datastore: faulty.store, listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger() })
      nodes.push(y)
      // libp2p's registrar writes the node's own protocols to the peer store while it starts: the disk refused it,
      // and the start failed with STORAGE_FULL
      await y.start()
      y.runs.handle(CAP, async (ctx) => ({ echo: ctx.input }))
      expect(y.agentId).toBe(x.agentId)
      // refused by the disk, or by the node's guard before they reached it: the writes x's refusals left the store
      // due to be opened again with are not let through until it has been (write-guard.ts)
      expect(faulty.refused - refusedBefore + y.storage.refusedWrites).toBeGreaterThan(0)
      const held = y.peerStoreMemory
      expect(held?.kept).toBeGreaterThan(0)
      // what it acknowledged is read, and the node serves its own protocols to a peer
      expect((await y.getRun(acked.run_id)).state).toBe('completed')
      expect(await d.join(y.addresses)).toBeGreaterThan(0)
      expect((await d.getRun(acked.run_id)).state).toBe('completed')
      const refused = await rejectsWith(d.delegate({ to_agent: y.agentId, task_id: 'disk-full-new', capability: CAP, input: {} }, call()), 'STORAGE_FULL')
      expect(refused.details).toMatchObject({ store: 'datastore', reason: 'no_space' })
      // room again: new runs are taken, and a peer record written now reaches the disk
      faulty.failing = false
      await until(async () => {
        try {
          await d.delegate({ to_agent: y.agentId, task_id: 'disk-full-after', capability: CAP, input: { n: 2 } }, call())
          return true
        } catch (err) {
          if ((err as { code?: string }).code !== 'STORAGE_FULL') throw err
          return false
        }
      }, 'the node to take runs again')
      await y.host.peerStore.merge(d.host.peerId, { tags: { 'disk-test': { value: 1 } } })
      expect((await y.host.peerStore.get(d.host.peerId)).tags.has('disk-test')).toBe(true)
      // on the disk itself, under the peer store's key (@libp2p/peer-store: /peers/<the peer id's CID>)
      const onDisk = await faulty.inner.get(new Key(`/peers/${d.host.peerId.toCID().toString()}`))
      expect(Buffer.from(onDisk).includes(Buffer.from('disk-test'))).toBe(true)
    } finally {
      await stopAll(nodes)
      nodes = []
      await level.close()
    }
  })
})
