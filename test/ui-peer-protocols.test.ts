/**
 * GET /v1/peers lists a bounded number of each peer's protocols. Found by
 * session 56's review: it listed every protocol a peer announced (600 from
 * one peer were shown). Now at most UI_PEER_PROTOCOLS_MAX, `/aap/` ones
 * first, each cut to UI_PEER_PROTOCOL_CHARS_MAX characters, with
 * `protocols_total` saying how many it announced. Real nodes on loopback.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import doc from '../protocols/api.openapi.json' with { type: 'json' }
import { newToken } from '../src/api/files.ts'
import { responseValidator } from '../src/api/openapi.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { UI_PEER_PROTOCOL_CHARS_MAX, UI_PEER_PROTOCOLS_MAX } from '../src/ui/constants.ts'
import { raw } from './api-helpers.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

const EXTRA = 600
/** A protocol name longer than the view lists. */
const LONG = `/long/${'p'.repeat(UI_PEER_PROTOCOL_CHARS_MAX * 2)}/1.0.0`

describe('a peer announcing hundreds of protocols', () => {
  let nodes: MeshNode[]
  let X: MeshNode, Y: MeshNode
  let api: ApiServer | undefined
  const token = newToken()

  beforeAll(async () => {
    nodes = await startLoneNodes(2)
    ;[X, Y] = nodes as [MeshNode, MeshNode]
    for (let i = 0; i < EXTRA; i++) await X.host.handle(`/z/${i}`, () => {})
    await X.host.handle(LONG, () => {})
    api = await startApiServer(Y, { token, port: 0 })
    await Y.host.dial(X.host.getMultiaddrs()[0]!)
  }, 120_000)

  afterAll(async () => {
    await api?.close()
    await stopAll(nodes)
  })

  it('lists at most UI_PEER_PROTOCOLS_MAX of them, /aap/ ones first, and says how many there are', async () => {
    // identify has told Y of X's protocols
    await until(async () => (await Y.host.peerStore.get(X.host.peerId)).protocols.length > EXTRA, 'X\'s protocols at Y')
    const announced = (await Y.host.peerStore.get(X.host.peerId)).protocols
    const res = await raw(`${api!.url}/v1/peers`, { token })
    expect(res.status).toBe(200)
    const peer = res.body.peers.find((p: { agent_id: string }) => p.agent_id === X.agentId)
    expect(peer.protocols).toHaveLength(UI_PEER_PROTOCOLS_MAX)
    expect(peer.protocols_total).toBe(announced.length)
    for (const p of peer.protocols as string[]) expect(p.length).toBeLessThanOrEqual(UI_PEER_PROTOCOL_CHARS_MAX)
    const aap = announced.filter(p => p.startsWith('/aap/'))
    expect(aap.length).toBeGreaterThan(0)
    expect(peer.protocols.slice(0, aap.length)).toEqual([...aap].sort())
    // the long one is listed cut
    expect(announced).toContain(LONG)
    expect(peer.protocols).toContain(`${LONG.slice(0, UI_PEER_PROTOCOL_CHARS_MAX - 1)}…`)
    expect(responseValidator('listPeers', 200)!(res.body)).toBe(true)
    // the document's limits are the node's constants
    const schema = doc.components.schemas.Peer.properties.protocols as unknown as { maxItems: number, items: { maxLength: number } }
    expect(schema.maxItems).toBe(UI_PEER_PROTOCOLS_MAX)
    expect(schema.items.maxLength).toBe(UI_PEER_PROTOCOL_CHARS_MAX)
  }, 120_000)
})
