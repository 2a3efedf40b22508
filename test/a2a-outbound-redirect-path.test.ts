/**
 * A redirect of a call to the configured A2A agent is followed only below the
 * configured URL's path, as the card's interfaces are kept only there: a 307
 * from the agent's own path to another path of the same origin (another
 * application mounted there, `/admin/`) would resend the delegation's body to
 * it. It is refused with the typed A2aRedirectRefusedError, and the run fails
 * naming the redirect; a redirect below the path is still followed. Real
 * nodes, a hand-made server on 127.0.0.1.
 */
import { once } from 'node:events'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { A2aOutbound, A2aRedirectRefusedError } from '../src/a2a/outbound.ts'
import { boundedFetch } from '../src/a2a/outbound-bounds.ts'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { rejectsWith, startMesh, stopAll } from './helpers.ts'
import { a2aCardJson, a2aInterface, answerCompleted, runThroughBridge } from './fixtures/a2a-card-json.ts'

describe('A2A outbound: redirects only below the configured path', () => {
  let nodes: MeshNode[] = []
  let server: Server
  let url = ''
  /** Requests outside every configured path (the other applications of the origin). */
  const outside: string[] = []
  const hits: string[] = []

  beforeAll(async () => {
    nodes = await startMesh(4, { transport: 'tcp' })
    server = createServer((req, res) => {
      let body = ''
      req.on('data', (c: Buffer) => { body += c.toString() })
      req.on('end', () => {
        const path = req.url ?? ''
        const section = path.split('/')[1] ?? ''
        if (section === 'admin' || section === 'agent-evil') {
          outside.push(`${req.method ?? ''} ${path} ${body.slice(0, 200)}`)
          answerCompleted(res, body.length > 0 ? body : '{"id":1}', 'agent')
          return
        }
        if (path.endsWith('agent-card.json')) {
          if (section === 'card-off') {
            res.writeHead(302, { location: '/admin/.well-known/agent-card.json' })
            res.end()
            return
          }
          res.writeHead(200, { 'content-type': 'application/json' })
          res.end(JSON.stringify(a2aCardJson({ name: section, skill: section, interfaces: [a2aInterface(`${url}/${section}/rpc`)] })))
          return
        }
        hits.push(`${req.method ?? ''} ${path}`)
        if (section === 'off-path') {
          res.writeHead(307, { location: '/admin/rpc' })
          res.end()
          return
        }
        if (section === 'sibling') {
          res.writeHead(307, { location: `${url}/agent-evil/rpc` })
          res.end()
          return
        }
        if (section === 'within' && path === '/within/rpc') {
          res.writeHead(307, { location: '/within/v2/rpc' })
          res.end()
          return
        }
        answerCompleted(res, body, 'agent')
      })
    })
    server.listen(0, '127.0.0.1')
    await once(server, 'listening')
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(async () => {
    server?.closeAllConnections(); server?.close()
    await stopAll(nodes)
  })

  it('does not resend a delegation redirected (307) to another path of the origin: the run fails naming the redirect', async () => {
    outside.length = 0
    const agent = await new A2aOutbound(nodes[1]!, silentLogger()).add(`${url}/off-path`)
    const ended = await runThroughBridge(nodes[0]!, nodes[1]!, agent, 'off-path')
    expect(ended.state).toBe('failed')
    expect(ended.failure).toContain('redirect (HTTP 307)')
    expect(outside).toEqual([])
  })

  it('refuses a redirect to a sibling path by prefix (/sibling/ is not /agent-evil/) with the typed A2aRedirectRefusedError', async () => {
    outside.length = 0
    const f = boundedFetch(1024 * 1024, new URL(`${url}/sibling/`))
    await expect(f(`${url}/sibling/rpc`, { method: 'POST', body: '{"id":1}', headers: { 'content-type': 'application/json' } })).rejects.toBeInstanceOf(A2aRedirectRefusedError)
    const agent = await new A2aOutbound(nodes[2]!, silentLogger()).add(`${url}/sibling`)
    const ended = await runThroughBridge(nodes[0]!, nodes[2]!, agent, 'sibling')
    expect(ended.state).toBe('failed')
    expect(ended.failure).toContain('redirect (HTTP 307)')
    expect(outside).toEqual([])
  })

  it('does not follow a card redirected to another path of the origin (INVALID_REQUEST naming the redirect)', async () => {
    outside.length = 0
    const err = await rejectsWith(new A2aOutbound(nodes[3]!, silentLogger()).add(`${url}/card-off`), 'INVALID_REQUEST')
    expect(err.message).toContain('redirect (HTTP 302)')
    expect(outside).toEqual([])
  })

  it('still follows a redirect below the configured path', async () => {
    hits.length = 0
    const agent = await new A2aOutbound(nodes[3]!, silentLogger()).add(`${url}/within`)
    const ended = await runThroughBridge(nodes[0]!, nodes[3]!, agent, 'within')
    expect(ended.state, ended.failure).toBe('completed')
    expect(hits).toEqual(['POST /within/rpc', 'POST /within/v2/rpc'])
  })
})
