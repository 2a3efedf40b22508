/**
 * An artifact store on a disk that fails (src/artifacts/store.ts): a write
 * the disk refuses is STORAGE_FULL, as the datastore's is, so a fetch stops
 * at once instead of downloading the artifact again from every holder and
 * answering "no holder answered"; and a commit that fails mid-way is the
 * fetch's answer: it used to go on to the next holder with the write it had
 * abandoned, and "commit" a manifest whose chunks were gone (ARTIFACT_CORRUPT
 * on every read, for good).
 *
 * The disk's faults are injected into node:fs/promises for this file only.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import type { FilePart } from '../src/artifacts/types.ts'
import { rejectsWith, startMesh, stopAll } from './helpers.ts'

const fault = vi.hoisted(() => ({ renameIntoChunks: 0, renames: 0, noSpaceInStaging: false }))

vi.mock('node:fs/promises', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs/promises')>()
  const rename: typeof fs.rename = async (from, to) => {
    // the n-th move of a staged chunk into chunks/ fails (an I/O error)
    if (fault.renameIntoChunks > 0 && String(to).includes('/chunks/') && ++fault.renames === fault.renameIntoChunks) {
      fault.renameIntoChunks = 0
      throw Object.assign(new Error('EIO: i/o error, rename'), { code: 'EIO' })
    }
    return fs.rename(from, to)
  }
  const writeFile: typeof fs.writeFile = async (path, data, opts) => {
    if (fault.noSpaceInStaging && String(path).includes('/tmp/w-')) throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' })
    return fs.writeFile(path, data, opts)
  }
  return { ...fs, rename, writeFile, default: { ...fs, rename, writeFile } }
})

const MIB = 1024 * 1024

async function * chunks (n: number, seed: number): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < n; i++) yield new Uint8Array(MIB).fill((seed + i) & 0xff)
}

describe('an artifact store on a failing disk', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode

  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
  })
  afterAll(async () => { await stopAll(nodes) })

  it('a fetch whose commit fails answers with it, and keeps no manifest without its chunks', async () => {
    const part: FilePart = await A.artifacts.put(chunks(3, 1), { media_type: 'application/octet-stream' })
    await B.artifacts.fetch(part.artifact, { holders: [A.agentId] })
    // C fetches from A (then B would be next); the second chunk's move into chunks/ fails
    fault.renames = 0
    fault.renameIntoChunks = 2
    const err = await rejectsWith(C.artifacts.fetch(part.artifact, { holders: [A.agentId, B.agentId] }), 'STORAGE_FULL')
    expect(err.details).toMatchObject({ store: 'artifacts', reason: 'write_failed' })
    // nothing that claims to be the artifact is left: a later fetch fetches it whole
    const again = await C.artifacts.fetch(part.artifact, { holders: [B.agentId] })
    expect(again.size).toBe(3 * MIB)
    const { chunks: read } = await C.artifacts.open(part.artifact)
    let bytes = 0
    for await (const c of read) bytes += c.byteLength
    expect(bytes).toBe(3 * MIB)
  })

  it('a disk out of space is STORAGE_FULL at once, not a download from every holder', async () => {
    const part: FilePart = await A.artifacts.put(chunks(2, 9), { media_type: 'application/octet-stream' })
    await B.artifacts.fetch(part.artifact, { holders: [A.agentId] })
    fault.noSpaceInStaging = true
    try {
      const err = await rejectsWith(C.artifacts.fetch(part.artifact, { holders: [A.agentId, B.agentId] }), 'STORAGE_FULL')
      expect(err.details).toMatchObject({ store: 'artifacts', reason: 'no_space' })
    } finally {
      fault.noSpaceInStaging = false
    }
  })
})
