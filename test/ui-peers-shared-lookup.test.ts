/**
 * Concurrent GET /v1/peers share a peer's look-up (a ping, its card). Found
 * by session 59's review: the cache was filled only once a look-up ended and
 * nothing tracked those under way, so 50 requests at once for one peer made
 * 50 card look-ups (UI_PEERS_PING_MAX bounded each request, not the node).
 * Real nodes on loopback; the card fetch is held until every request has
 * reached the peer, so all of them ask while the first look-up runs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { UI_PING_TIMEOUT_MS } from '../src/ui/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:peers-shared', version: '1.0.0' }
/** Requests sent at once. */
const REQUESTS = 50

describe('GET /v1/peers asked many times at once', () => {
  let nodes: MeshNode[]
  let A: MeshNode, B: MeshNode
  let api: ApiServer
  const token = newToken()

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    await B.publishCard({ name: 'peer-b', capabilities: [CAP] })
    api = await startApiServer(A, { token, port: 0 })
  }, 120_000)

  afterAll(async () => {
    await api?.close()
    await stopAll(nodes)
  })

  it('looks a peer up once for all of them', async () => {
    // each request reads the peer's store entry just before it decides on a look-up: counted here
    const store = A.host.peerStore
    const storeGet = store.get.bind(store)
    let reached = 0
    store.get = async (peer, ...rest) => {
      if (peer.toString() === B.agentId) reached++
      return storeGet(peer, ...rest)
    }
    const getCard = A.getCard.bind(A)
    let cardLookUps = 0
    A.getCard = async (agentId, opts) => {
      if (agentId === B.agentId) {
        cardLookUps++
        await until(() => reached >= REQUESTS, 'every request to reach the peer')
        // the look-up's UI_PING_TIMEOUT_MS ran while this wait held it: on a busy machine it ran out first, and the
        // name came back null. The wait is the test's, so the look-up gets a bound of its own from here
        return getCard(agentId, { ...opts, signal: AbortSignal.timeout(UI_PING_TIMEOUT_MS) })
      }
      return getCard(agentId, opts)
    }
    try {
      const answers = await Promise.all(Array.from({ length: REQUESTS }, async () => raw(`${api.url}/v1/peers`, { token })))
      for (const a of answers) {
        expect(a.status).toBe(200)
        expect(a.body.peers.find((p: { agent_id: string }) => p.agent_id === B.agentId)?.name).toBe('peer-b')
      }
      expect(cardLookUps).toBe(1)
    } finally {
      store.get = storeGet
      A.getCard = getCard
    }
  }, 120_000)
})
