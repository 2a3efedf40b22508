/**
 * GET /v1/discover hands the node's discover the signal of its client: a
 * client that gives up (a CLI interrupted, an MCP call canceled) ends the
 * lookup at once. Before, the lookup ran on to its budget, which timeout_ms
 * can now make DISCOVER_TIMEOUT_MAX_MS (found by session 60's review).
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { DiscoverOptions } from '../src/card/discovery.ts'
import type { MeshNode } from '../src/node.ts'
import { startLoneNodes, stopAll, until } from './helpers.ts'

describe('a discover whose API client goes away', () => {
  let nodes: MeshNode[] = []
  let node: MeshNode
  let api: ApiServer
  const token = newToken()

  beforeAll(async () => {
    nodes = await startLoneNodes(1)
    node = nodes[0]!
    api = await startApiServer(node, { token, port: 0, checkResponses: true })
  })
  afterAll(async () => {
    await api?.close()
    await stopAll(nodes)
  })

  it('is ended through the signal the node\'s discover was given', async () => {
    let given: AbortSignal | undefined
    let called = false
    // a lookup that lasts until its signal ends it (as a slow mesh's would, up to timeout_ms)
    vi.spyOn(node, 'discover').mockImplementation(async (_query, opts?: DiscoverOptions) => {
      called = true
      given = opts?.signal
      await new Promise<void>((resolve) => { given?.addEventListener('abort', () => { resolve() }, { once: true }) })
      return []
    })
    const ctl = new AbortController()
    const res = fetch(`${api.url}/v1/discover?capability=cap:slow&timeout_ms=30000`, { headers: { authorization: `Bearer ${token}` }, signal: ctl.signal })
    const settled = res.then(() => 'answered', () => 'aborted')
    await until(() => called, 'the discover to start')
    // before: no signal was given, and the lookup ran on to its budget
    expect(given).toBeDefined()
    ctl.abort()
    await until(() => given?.aborted === true, 'the discover\'s signal to end once its client went away')
    expect(await settled).toBe('aborted')
  })
})
