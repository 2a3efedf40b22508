/**
 * The node-wide bound on GET /v1/peers look-ups in flight
 * (UI_PEER_LOOKUPS_IN_FLIGHT_MAX, src/api/ui-routes.ts). Each request looks up
 * at most UI_PEERS_PING_MAX peers; requests at once share a peer's look-up
 * under way, and past the node-wide bound a request shows what is at hand.
 * Real loopback hosts, more of them connected than the bound; their card
 * look-ups are held until every request has decided for every peer, so the
 * look-ups in flight peak where the rule puts them: three requests would ask
 * for 16 + 16 + 8 = 40 peers, the bound stops the third.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { UI_PEER_LOOKUPS_IN_FLIGHT_MAX, UI_PEERS_PING_MAX } from '../src/ui/constants.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { raw } from './api-helpers.ts'
import { startLoopbackHost, startMesh, stopAll, until } from './helpers.ts'

/** Peers connected to A: more than the bound, fewer than three requests' worth. */
const PEERS = 40
const REQUESTS = 3

describe('GET /v1/peers with more peers than the node may look up at once', () => {
  let nodes: MeshNode[]
  let A: MeshNode
  const peers: MeshHost[] = []
  let api: ApiServer
  const token = newToken()

  beforeAll(async () => {
    expect(REQUESTS * UI_PEERS_PING_MAX).toBeGreaterThan(PEERS)
    expect(PEERS).toBeGreaterThan(UI_PEER_LOOKUPS_IN_FLIGHT_MAX)
    nodes = await startMesh(1, { transport: 'tcp' })
    A = nodes[0] as MeshNode
    for (let i = 0; i < PEERS; i++) {
      const h = await startLoopbackHost(undefined, { clientMode: true })
      peers.push(h)
      await h.dial(A.host.getMultiaddrs())
    }
    await until(() => new Set(A.host.getConnections().map(c => c.remotePeer.toString())).size === PEERS, 'every peer connected to A')
    api = await startApiServer(A, { token, port: 0 })
  }, 120_000)

  afterAll(async () => {
    await api?.close()
    await Promise.all(peers.map(async h => h.stop()))
    await stopAll(nodes)
  })

  it('never has more look-ups in flight than UI_PEER_LOOKUPS_IN_FLIGHT_MAX, and answers every request', async () => {
    // each request reads a peer's store entry, then decides at once whether to look it up: the reads that returned are counted
    const store = A.host.peerStore
    const storeGet = store.get.bind(store)
    let read = 0
    store.get = async (peer, ...rest) => {
      const entry = await storeGet(peer, ...rest)
      read++
      return entry
    }
    let inFlight = 0
    let peak = 0
    let calls = 0
    let release = (): void => {}
    const released = new Promise<void>((resolve) => { release = resolve })
    const getCard = A.getCard.bind(A)
    A.getCard = async (agentId, opts) => {
      calls++
      inFlight++
      peak = Math.max(peak, inFlight)
      try {
        await released
        return await getCard(agentId, opts)
      } finally {
        inFlight--
      }
    }
    try {
      const answers = Promise.all(Array.from({ length: REQUESTS }, async () => raw(`${api.url}/v1/peers`, { token })))
      // every request has read every peer's entry, and (a poll later) decided on it
      await until(() => read >= REQUESTS * PEERS, 'every request to decide for every peer')
      release()
      for (const a of await answers) {
        expect(a.status).toBe(200)
        expect(a.body.total).toBe(PEERS)
        expect(a.body.peers).toHaveLength(PEERS)
      }
      expect(peak).toBe(UI_PEER_LOOKUPS_IN_FLIGHT_MAX)
      expect(calls).toBe(UI_PEER_LOOKUPS_IN_FLIGHT_MAX)
    } finally {
      store.get = storeGet
      A.getCard = getCard
    }
  }, 120_000)
})
