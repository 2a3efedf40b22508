/**
 * What a holder says about its own store is not this node's store refusing
 * (a hostile holder answering STORAGE_FULL stopped every fetch that reached
 * it first), and a caller that joins a fetch under way has the holders it
 * names asked too (before, the first caller's options alone were used).
 * Found by session 45's artifact review.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ARTIFACT_PROTOCOL } from '../src/constants.ts'
import { StorageFullError } from '../src/errors.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { serveBulk } from '../src/wire/bulk.ts'
import { startLoneNodes, startMesh, stopAll } from './helpers.ts'

describe('a hostile holder answering STORAGE_FULL', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, H: MeshNode, B: MeshNode
  let asked = 0
  beforeAll(async () => {
    nodes = await startMesh(3)
    ;[A, H, B] = nodes as [MeshNode, MeshNode, MeshNode]
    await H.host.unhandle(ARTIFACT_PROTOCOL)
    await serveBulk(H.host, {
      protocol: ARTIFACT_PROTOCOL, maxRequestBytes: 4096, maxPipelined: 16, maxInboundStreams: 4, handlerTimeoutMs: 5000, log: silentLogger(),
      methods: {
        manifest: async () => { asked++; throw new StorageFullError('my disk is full, go away') },
        chunk: async () => { asked++; throw new StorageFullError('my disk is full, go away') }
      }
    })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('is dropped and the fetch goes on to the honest holder', async () => {
    const part = await B.artifacts.put(new Uint8Array(5000).fill(3), { media_type: 'application/octet-stream' })
    // the hostile peer is named first (a DHT provider record or a stale hint does the same)
    const m = await A.artifacts.fetch(part.artifact, { holders: [H.agentId, B.agentId] })
    expect(asked).toBeGreaterThan(0)
    expect(m.size).toBe(5000)
  })
})

describe('two callers fetching one artifact at once', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  beforeAll(async () => {
    // A knows where B is but is not connected to it, and has no DHT: B is found only by a hint
    nodes = await startLoneNodes(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    await A.host.peerStore.merge(B.host.peerId, { multiaddrs: B.host.getMultiaddrs() })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('asks the holders the second caller names, too', async () => {
    const part = await B.artifacts.put(new Uint8Array(5000).fill(4), { media_type: 'application/octet-stream' })
    const first = A.artifacts.fetch(part.artifact).then(() => 'ok', (e: { code?: string }) => e.code)
    const second = A.artifacts.fetch(part.artifact, { holders: [B.agentId] }).then(() => 'ok', (e: { code?: string }) => e.code)
    const [r1, r2] = await Promise.all([first, second])
    expect({ r1, r2 }).toEqual({ r1: 'ok', r2: 'ok' })
  }, 40_000)

  it('control: the hinted fetch alone succeeds', async () => {
    const part = await B.artifacts.put(new Uint8Array(5000).fill(5), { media_type: 'application/octet-stream' })
    const m = await A.artifacts.fetch(part.artifact, { holders: [B.agentId] })
    expect(m.size).toBe(5000)
  }, 40_000)
})
