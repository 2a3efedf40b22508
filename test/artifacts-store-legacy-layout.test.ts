/**
 * A node upgraded on a data dir whose artifact store was written before pins
 * existed (chunks/, manifests/, tmp/ and no pins/): nothing was evicted then,
 * so every artifact there was kept for good. After the upgrade its own
 * uploads stay pinned: a write short of room is refused (STORAGE_FULL)
 * rather than delete them. A migration cut short is done again.
 */
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, expect, it } from 'vitest'
import { createMeshNode, type MeshNode } from '../src/node.ts'
import { silentLogger } from '../src/logger.ts'
import { rejectsWith } from './helpers.ts'

const dirs: string[] = []
const nodes: MeshNode[] = []
afterEach(async () => {
  for (const n of nodes.splice(0)) await n.stop()
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true })
})

async function started (dataDir: string, artifactStoreMaxBytes?: number): Promise<MeshNode> {
  const n = await createMeshNode({ dataDir, listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true, logger: silentLogger(), ...(artifactStoreMaxBytes === undefined ? {} : { artifactStoreMaxBytes }) })
  await n.start()
  nodes.push(n)
  return n
}

/** A data dir holding one upload of this node's, its artifact store laid out as before pins existed. */
async function legacyDataDir (): Promise<{ dir: string, own: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'aap-legacy-store-'))
  dirs.push(dir)
  const first = await started(dir)
  const own = (await first.artifacts.put(new TextEncoder().encode('my own upload'), { media_type: 'text/plain' })).artifact
  await first.stop()
  nodes.splice(0)
  await rm(join(dir, 'artifacts', 'pins'), { recursive: true, force: true })
  await rm(join(dir, 'artifacts', 'outputs'), { recursive: true, force: true })
  return { dir, own }
}

it('keeps an own upload from a store written before pins existed: a write short of room is refused', async () => {
  const { dir, own } = await legacyDataDir()
  const upgraded = await started(dir, 4096)
  expect((await upgraded.artifacts.local(own))?.size).toBe(13)
  await rejectsWith(upgraded.artifacts.put(new Uint8Array(3950).fill(7), { media_type: 'application/octet-stream' }), 'STORAGE_FULL')
  expect((await upgraded.artifacts.local(own))?.size).toBe(13)
  expect(await readdir(join(dir, 'artifacts', 'pins'))).toEqual([own])
}, 60_000)

it('pins a legacy store again when the last start stopped halfway through pinning it', async () => {
  const { dir, own } = await legacyDataDir()
  // what a crash while pinning leaves: a part of the pins in tmp/, no pins/
  await mkdir(join(dir, 'artifacts', 'tmp', 'pins'), { recursive: true })
  await writeFile(join(dir, 'artifacts', 'tmp', 'pins', 'not-an-artifact'), '')
  const upgraded = await started(dir, 4096)
  await rejectsWith(upgraded.artifacts.put(new Uint8Array(3950).fill(7), { media_type: 'application/octet-stream' }), 'STORAGE_FULL')
  expect(await readdir(join(dir, 'artifacts', 'pins'))).toEqual([own])
}, 60_000)
