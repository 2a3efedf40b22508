/**
 * A holder that evicts an artifact while a peer fetches it (session 44's
 * eviction) answers the peer's next chunk requests with ARTIFACT_NOT_FOUND,
 * and the fetcher goes on from the next holder, keeping what it verified.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ARTIFACT_CHUNK_BYTES } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll } from './helpers.ts'

const MIB = 1024 * 1024

async function * filled (n: number, seed: number): AsyncGenerator<Uint8Array> {
  for (let i = 0; i < n; i++) yield new Uint8Array(MIB).fill((seed + i) & 0xff)
}

describe('a holder evicts the artifact mid-fetch', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode, C: MeshNode
  beforeAll(async () => {
    expect(ARTIFACT_CHUNK_BYTES).toBe(MIB)
    // B's store holds one 4 MiB copy and little more
    nodes = await startMesh(3, { nodeOptions: i => i === 1 ? { artifactStoreMaxBytes: 5 * MIB } : {} })
    ;[A, B, C] = nodes as [MeshNode, MeshNode, MeshNode]
  })
  afterAll(async () => { await stopAll(nodes) })

  it('the fetcher gets ARTIFACT_NOT_FOUND from it and finishes from the next holder', async () => {
    const part = await A.artifacts.put(filled(4, 1), { media_type: 'application/octet-stream' })
    await B.artifacts.fetch(part.artifact, { holders: [A.agentId] })
    expect(B.artifacts.store.holds(part.artifact)).toEqual({ pinned: false })
    // the first chunk C asks B for: B stores an upload of its own first, which evicts the copy
    const store = B.artifacts.store
    const chunk = store.chunk.bind(store)
    let first = true
    store.chunk = async (cid: string) => {
      if (first) {
        first = false
        await B.artifacts.put(filled(2, 9), { media_type: 'application/octet-stream' })
      }
      return await chunk(cid)
    }
    const servedByA = A.artifacts.stats.chunksServed
    const m = await C.artifacts.fetch(part.artifact, { holders: [B.agentId, A.agentId] })
    expect(m.size).toBe(4 * MIB)
    expect(store.stats.evicted).toBe(1)
    expect(store.holds(part.artifact)).toBeUndefined()
    expect(A.artifacts.stats.chunksServed - servedByA).toBe(4)
    let n = 0
    for await (const c of (await C.artifacts.open(part.artifact)).chunks) n += c.byteLength
    expect(n).toBe(4 * MIB)
  })
})
