/**
 * Callers that ask the same peer while no stream to it is open share one
 * dial. The dial belongs to none of them: the first caller giving up ends
 * its own wait, not the dial the others wait for. Before, the dial ran
 * under the first caller's signal, and its abort failed every other caller
 * with "aborted by the caller". Real libp2p nodes on TCP loopback.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshNode } from '../src/node.ts'
import { RpcClient, serve } from '../src/wire/rpc.ts'
import { rejectsWith, startLoneNodes, stopAll } from './helpers.ts'

const ECHO = '/aap-test/shared-dial/0.1.0'

describe('a dial shared by concurrent callers', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let unserve: (() => Promise<void>) | undefined

  beforeAll(async () => {
    nodes = await startLoneNodes(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    unserve = await serve(B.host, { protocol: ECHO, maxFrameBytes: 1024, methods: { echo: { handle: async (body) => body as object } } })
  })
  afterAll(async () => {
    await unserve?.()
    await stopAll(nodes)
  })

  it('the first caller aborting fails only its own call; the others get their answers over the dial', async () => {
    await A.host.peerStore.merge(B.host.peerId, { multiaddrs: B.host.getMultiaddrs() })
    expect(A.host.getConnections(B.host.peerId)).toHaveLength(0)
    const client = new RpcClient(A.host, { protocol: ECHO, maxFrameBytes: 1024 })
    try {
      const first = new AbortController()
      const p1 = client.call(B.host.peerId, 'echo', { n: 1 }, { signal: first.signal })
      const p2 = client.call(B.host.peerId, 'echo', { n: 2 })
      const p3 = client.call(B.host.peerId, 'echo', { n: 3 })
      first.abort(new Error('the first caller left'))
      const err = await rejectsWith(p1, 'TIMEOUT')
      expect(err.details?.reason).toBe('aborted')
      expect(await p2).toEqual({ n: 2 })
      expect(await p3).toEqual({ n: 3 })
    } finally {
      client.close()
    }
  })
})
