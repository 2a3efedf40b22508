/**
 * ARTIFACT_CORRUPT from a fetch means a holder sent damaged bytes, as this
 * node's own checks found (protocols/artifact.md); a holder's error frame
 * with that code is only its word, and drops it like any other failure.
 * Before, such a frame turned the whole fetch into ARTIFACT_CORRUPT with the
 * peer's own message and details. And a holder named by a caller who joins
 * the fetch while it asks its slow holders again is asked too, before the
 * next of them (before, it was never asked). Found by session 59's artifact review.
 */
import type { PeerId } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ARTIFACT_MAX_PIPELINED_REQUESTS, ARTIFACT_PROTOCOL, HANDLER_TIMEOUT_MS } from '../src/constants.ts'
import type { FetchOptions } from '../src/artifacts/service.ts'
import { ArtifactCorruptError, ArtifactNotFoundError } from '../src/errors.ts'
import type { MeshNode } from '../src/node.ts'
import { rejectsWith, startLoneNodes, stopAll } from './helpers.ts'
import { serveTestBulk } from './fixtures/test-bulk.ts'

const PEER_SAYS = 'the holder says these bytes are damaged'

describe('a holder answering ARTIFACT_CORRUPT error frames', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, H: MeshNode
  /** Artifacts whose manifest H refuses with ARTIFACT_CORRUPT; the others' manifests it serves as stored. */
  const refuseManifest = new Set<string>()
  const asked: string[] = []
  beforeAll(async () => {
    // A knows where H is but is connected to no one and has no provider: H is the only holder it asks
    nodes = await startLoneNodes(2)
    ;[A, H] = nodes as [MeshNode, MeshNode]
    await A.host.peerStore.merge(H.host.peerId, { multiaddrs: H.host.getMultiaddrs() })
    await H.host.unhandle(ARTIFACT_PROTOCOL)
    await serveTestBulk(H.host, ARTIFACT_PROTOCOL, {
      manifest: async (body) => {
        const artifact = (body as { artifact: string }).artifact
        asked.push('manifest')
        if (refuseManifest.has(artifact)) throw new ArtifactCorruptError(PEER_SAYS, { reason: 'peer_says', artifact })
        const data = await H.artifacts.store.manifestBytes(artifact)
        if (data === undefined) throw new ArtifactNotFoundError(`no artifact ${artifact} here`, { artifact })
        return { body: { artifact }, data }
      },
      chunk: async () => {
        asked.push('chunk')
        throw new ArtifactCorruptError(PEER_SAYS, { reason: 'peer_says' })
      }
    }, { maxPipelined: ARTIFACT_MAX_PIPELINED_REQUESTS, handlerTimeoutMs: HANDLER_TIMEOUT_MS })
  })
  afterAll(async () => { await stopAll(nodes) })

  it('for the manifest: the fetch from it alone fails ARTIFACT_NOT_FOUND, not the peer\'s ARTIFACT_CORRUPT', async () => {
    const part = await H.artifacts.put(new Uint8Array(3000).fill(1), { media_type: 'application/octet-stream' })
    refuseManifest.add(part.artifact)
    asked.length = 0
    const e = await rejectsWith(A.artifacts.fetch(part.artifact, { holders: [H.agentId] }), 'ARTIFACT_NOT_FOUND')
    expect(asked).toContain('manifest')
    expect(e.message).not.toContain(PEER_SAYS)
    expect(e.details).toMatchObject({ artifact: part.artifact, tried: 1, last: 'ARTIFACT_CORRUPT' })
    expect(A.artifacts.stats.rejected).toBe(0)
  })

  it('for a chunk: the fetch from it alone fails ARTIFACT_NOT_FOUND, not the peer\'s ARTIFACT_CORRUPT', async () => {
    const part = await H.artifacts.put(new Uint8Array(3000).fill(2), { media_type: 'application/octet-stream' })
    asked.length = 0
    const e = await rejectsWith(A.artifacts.fetch(part.artifact, { holders: [H.agentId] }), 'ARTIFACT_NOT_FOUND')
    expect(asked).toEqual(['manifest', 'chunk'])
    expect(e.message).not.toContain(PEER_SAYS)
    expect(e.details).toMatchObject({ artifact: part.artifact, tried: 1, last: 'ARTIFACT_CORRUPT' })
    expect(A.artifacts.stats.rejected).toBe(0)
  })
})

/** The order a fetch asks holders in (service.ts `holders`, private): `again` are the holders dropped as too slow. */
type HolderOrder = (id: string, opts: FetchOptions, again: readonly PeerId[]) => AsyncGenerator<PeerId>

describe('a caller joining while the slow holders are asked again', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, X: MeshNode, Y: MeshNode
  beforeAll(async () => {
    // A is connected to no one and has no provider: it asks only the holders it is told of
    nodes = await startLoneNodes(3)
    ;[A, X, Y] = nodes as [MeshNode, MeshNode, MeshNode]
  })
  afterAll(async () => { await stopAll(nodes) })

  it('has the holder it names asked too', async () => {
    const part = await A.artifacts.put(new Uint8Array(10).fill(3), { media_type: 'application/octet-stream' })
    const holders = (A.artifacts as unknown as { holders: HolderOrder }).holders.bind(A.artifacts)
    const hints = [X.agentId]
    const slow: PeerId[] = []
    // the DHT, with no peers, would only wait out its timeout: asked with a signal already aborted it names no one at once
    const order = holders(part.artifact, { holders: hints, signal: AbortSignal.abort() }, slow)
    const first = await order.next()
    expect(first.value?.toString()).toBe(X.host.peerId.toString())
    // X was dropped for its rate bound: it is asked again once every other holder has failed
    slow.push(X.host.peerId)
    const again = await order.next()
    expect(again.value?.toString()).toBe(X.host.peerId.toString())
    // a caller joins the fetch now, naming Y (service.ts `fetch` pushes onto the shared hints)
    hints.push(Y.agentId)
    const rest: string[] = []
    for await (const p of order) rest.push(p.toString())
    expect(rest).toEqual([Y.host.peerId.toString()])
  })
})
