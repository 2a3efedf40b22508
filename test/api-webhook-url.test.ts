/**
 * A webhook the node cannot POST to is refused when it is set. Found by
 * session 59's review: PUT /v1/card took any http(s) text the document's
 * pattern matched, answered 200, and every work item was then retried
 * against it and given up on with no POST made: credentials in the URL are
 * a TypeError to fetch, a port past 65535 does not parse. Both are now
 * INVALID_REQUEST (reason bad_webhook), and nothing is published. The same
 * review later found port 0 and the Fetch standard's blocked ports (6000,
 * 10080, 6665-6669, 5060, ...) still taken: fetch refuses those before
 * connecting ('bad port'), at every delivery.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { WEBHOOK_BAD_PORTS } from '../src/api/constants.ts'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { raw } from './api-helpers.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const CAP = { capability_id: 'cap:hook-url', version: '1.0.0' }

describe('PUT /v1/card with a webhook the node cannot use', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  let hook: Server
  let hookPort = 0
  const posts: string[] = []
  const token = newToken()

  beforeAll(async () => {
    nodes = await startMesh(2)
    api = await startApiServer(nodes[0]!, { token, port: 0, checkResponses: true })
    hook = createServer((req, res) => {
      posts.push(String(req.headers['x-aap-work-item']))
      req.resume()
      res.writeHead(200).end()
    })
    await new Promise<void>(resolve => hook.listen(0, '127.0.0.1', resolve))
    hookPort = (hook.address() as AddressInfo).port
  }, 60_000)

  afterAll(async () => {
    hook.closeAllConnections()
    hook.close()
    await api.close()
    await stopAll(nodes)
  })

  const put = async (webhook: string): Promise<{ status: number, body: any }> =>
    raw(`${api.url}/v1/card`, { method: 'PUT', token, body: JSON.stringify({ card: { name: 'hooked', capabilities: [CAP] }, webhook }) })

  it('refuses credentials in the URL and a port that does not parse (400, reason bad_webhook), publishing nothing', async () => {
    for (const webhook of [`http://agent:s3cret@127.0.0.1:${hookPort}/hook`, 'http://127.0.0.1:99999/hook']) {
      const r = await put(webhook)
      expect(r.status, `${webhook}: ${JSON.stringify(r.body)}`).toBe(400)
      expect(r.body.error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'bad_webhook' } })
    }
    const state = await raw(`${api.url}/v1/card`, { token })
    expect(state.body).toMatchObject({ card: null, webhook: null })
  })

  it('refuses port 0 and a port fetch blocks (400, reason bad_webhook), publishing nothing', async () => {
    for (const webhook of ['http://127.0.0.1:6000/hook', 'http://127.0.0.1:0/hook', 'https://[::1]:10080/hook', 'http://127.0.0.1:6667/hook']) {
      const r = await put(webhook)
      expect(r.status, `${webhook}: ${JSON.stringify(r.body)}`).toBe(400)
      expect(r.body.error).toMatchObject({ code: 'INVALID_REQUEST', details: { reason: 'bad_webhook' } })
    }
    const state = await raw(`${api.url}/v1/card`, { token })
    expect(state.body).toMatchObject({ card: null, webhook: null })
  })

  it('every blocked port is one this fetch refuses before connecting', async () => {
    // fetch checks the port before it connects: no connection is made to any of these
    const causes = await Promise.all([...WEBHOOK_BAD_PORTS].map(async port =>
      fetch(`http://127.0.0.1:${port}/`).then(() => 'connected', (err: Error) => String((err.cause as Error | undefined)?.message))))
    expect(new Set(causes)).toEqual(new Set(['bad port']))
  })

  it('takes a usable webhook and POSTs the work item to it', async () => {
    const r = await put(`http://127.0.0.1:${hookPort}/hook?secret=s3cret`)
    expect(r.status).toBe(200)
    await nodes[1]!.delegate({ to_agent: nodes[0]!.agentId, task_id: 'hook-url-1', capability: CAP, input: {} })
    await until(() => posts.length > 0, 'the work item POSTed to the webhook')
    expect(api.bridge.stats).toMatchObject({ webhookGaveUp: 0 })
  })
})
