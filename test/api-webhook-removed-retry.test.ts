/**
 * A webhook removed during a retry's backoff is not posted to again. Found by
 * session 57's review: the bridge checked for a removed or replaced webhook
 * before its backoff wait but not after, and POSTed the item once more to
 * the URL the agent had just taken back.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { pino } from 'pino'
import { afterAll, expect, it, vi } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

// a backoff long beside the PUT that removes the webhook: at 250 ms a busy machine could let the retry's POST go first
vi.mock('../src/constants.ts', async (orig) => ({ ...(await orig<typeof import('../src/constants.ts')>()), API_WEBHOOK_RETRY_MS: 5_000 }))

let nodes: MeshNode[] = []
let api: ApiServer | undefined
let hook: Server | undefined
afterAll(async () => {
  hook?.closeAllConnections()
  hook?.close()
  await api?.close()
  await stopAll(nodes)
})

it('a webhook removed (PUT /v1/card webhook null) during the retry backoff gets no further POST', async () => {
  nodes = await startMesh(2)
  const [a, b] = nodes as [MeshNode, MeshNode]
  const token = newToken()
  const cap = { capability_id: 'cap:x', version: '1.0.0' }
  const posts: string[] = []
  /** How many POSTs had come when the removal was answered. */
  let postsAtRemoval = -1
  const removed = Promise.withResolvers<void>()
  // the bridge says when a delivery failed and it waits to retry: the agent removes its webhook then
  let retrying = 0
  const log = pino({ level: 'debug' }, {
    write: (line: string) => {
      const entry = JSON.parse(line) as { msg?: string }
      if (entry.msg !== 'webhook delivery failed; retrying' || ++retrying > 1) return
      // (the PUT is answered in milliseconds; the backoff is API_WEBHOOK_RETRY_MS, 5 s in this file)
      raw(`${api!.url}/v1/card`, { method: 'PUT', token, body: JSON.stringify({ card: { name: 's', capabilities: [cap] }, webhook: null }) }).then((r) => {
        postsAtRemoval = posts.length
        if (r.status === 200 && r.body.webhook === null) removed.resolve()
        else removed.reject(new Error(`the webhook was not removed: ${r.status} ${JSON.stringify(r.body)}`))
      }, removed.reject)
    }
  })
  api = await startApiServer(a, { token, port: 0, checkResponses: true, logger: log })
  // the agent's webhook fails the first POST, takes any later one
  hook = createServer((req, res) => {
    posts.push(String(req.headers['x-aap-work-item']))
    req.resume()
    res.writeHead(posts.length === 1 ? 500 : 200).end()
  })
  await new Promise<void>(resolve => hook!.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`
  const r = await raw(`${api.url}/v1/card`, { method: 'PUT', token, body: JSON.stringify({ card: { name: 's', capabilities: [cap] }, webhook: url }) })
  expect(r.status).toBe(200)
  await b.delegate({ to_agent: a.agentId, task_id: 'hook-1', capability: cap, input: {} })
  await removed.promise
  // the bridge is done with the item: taken by a POST, or given up on
  await until(() => api!.bridge.stats.webhookDelivered + api!.bridge.stats.webhookGaveUp > 0, 'the bridge done with the item')
  expect(postsAtRemoval).toBe(1)
  expect(posts).toHaveLength(1)
  expect(api.bridge.stats).toMatchObject({ webhookDelivered: 0, webhookGaveUp: 1 })
}, 60_000)
