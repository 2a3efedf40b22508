/**
 * A MeshNode whose start fails early (libp2p refusing a listen address,
 * after the datastore was opened and its sync timer started) closes what it
 * opened: the same process can start a node on that data directory again.
 * So does one whose start fails late, at its card (the disk refused it):
 * found by session 46's review, start() rejected while the host stayed up,
 * listening and serving runs, and a second start() claimed success.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { MemoryDatastore } from 'datastore-core'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { FaultyDatastore } from './fixtures/faulty-datastore.ts'

describe('MeshNode.start failing early', () => {
  const dirs: string[] = []
  const nodes: MeshNode[] = []
  afterAll(async () => {
    await Promise.all(nodes.map(async n => n.stop()))
    await Promise.all(dirs.map(async d => rm(d, { recursive: true, force: true })))
  })

  it('a bad listen address leaves the data directory free for the next start in the same process', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-node-start-'))
    dirs.push(dir)
    const failed = await createMeshNode({ dataDir: dir, listen: ['garbage'] })
    await expect(failed.start()).rejects.toThrow(/multiaddr/)
    // the datastore was open and syncing when the host refused the address
    expect(failed.durability).toBeDefined()
    const again = await createMeshNode({ dataDir: dir, listen: ['/ip4/127.0.0.1/tcp/0'] })
    nodes.push(again)
    await again.start()
    // the same identity: the key file the failed start wrote is the one used
    expect(again.agentId).toBe(failed.agentId)
    await again.stop()
  }, 30_000)

  it('a start that fails on a data directory another node holds leaves that node running', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-node-start-'))
    dirs.push(dir)
    const holder = await createMeshNode({ dataDir: dir, listen: ['/ip4/127.0.0.1/tcp/0'] })
    nodes.push(holder)
    await holder.start()
    const second = await createMeshNode({ dataDir: dir, listen: ['/ip4/127.0.0.1/tcp/0'] })
    await expect(second.start()).rejects.toThrow(/held by another process/)
    // the holder still reads and writes its store
    await holder.publishCard({ name: 'holder', description: '', capabilities: [], tags: [] })
    expect(holder.card?.name).toBe('holder')
  }, 30_000)

  it('a card the disk refuses at start rejects the start and leaves nothing running', async () => {
    const faulty = new FaultyDatastore(new MemoryDatastore())
    faulty.only = (key) => key === '/aap/self/card'
    faulty.failing = true
    const n = await createMeshNode({ listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger(), datastore: faulty.store, card: { name: 'refused', capabilities: [] } })
    await expect(n.start()).rejects.toMatchObject({ code: 'STORAGE_FULL' })
    expect(n.host.status).toBe('stopped')
    expect(n.host.getMultiaddrs()).toEqual([])
    // a second start is a real one: with the disk taking writes it starts, card and all
    faulty.failing = false
    nodes.push(n)
    await n.start()
    expect(n.host.status).toBe('started')
    expect(n.card?.name).toBe('refused')
  }, 30_000)
})
