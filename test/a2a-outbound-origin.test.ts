/**
 * The bridge talks to the origin the operator configured and to no other, and
 * there only below the configured URL's path: an interface of the card at
 * another origin is left out (with none at the configured origin, their paths
 * are used there if they fall below the configured path), one at the origin
 * but outside the path is left out too, a redirect of the card or
 * of a call to another origin is refused and not followed (one within the
 * origin is, at most A2A_REDIRECTS_MAX times), so a delegation's input never
 * reaches a host nobody configured. Server A is the configured one; server B stands for any
 * other address (another port on 127.0.0.1 here; a metadata service or an
 * intranet host in real life). Real nodes, hand-made servers.
 */
import { once } from 'node:events'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { A2aOutbound } from '../src/a2a/outbound.ts'
import { silentLogger } from '../src/logger.ts'
import { A2A_REDIRECTS_MAX } from '../src/a2a/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { rejectsWith, startMesh, stopAll } from './helpers.ts'
import { a2aCardJson, a2aInterface, answerCompleted, runThroughBridge } from './fixtures/a2a-card-json.ts'

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void

async function serve (h: Handler): Promise<{ server: Server, url: string }> {
  const server = createServer((req, res) => {
    let body = ''
    req.on('data', (c: Buffer) => { body += c.toString() })
    req.on('end', () => { h(req, res, body) })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }
}

function card (skill: string, interfaces: unknown[]): Record<string, unknown> {
  return a2aCardJson({ name: 'origin-test', skill, interfaces })
}

describe('A2A outbound: only the configured origin', () => {
  let nodes: MeshNode[] = []
  let a: { server: Server, url: string }
  let b: { server: Server, url: string }
  const hitsA: string[] = []
  const hitsB: string[] = []

  beforeAll(async () => {
    // one bridge node per case: a delegator keeps the card it last saw of a node
    nodes = await startMesh(7, { transport: 'tcp' })
    b = await serve((req, res, body) => {
      hitsB.push(`${req.method ?? ''} ${req.url ?? ''} ${body.slice(0, 200)}`)
      if (req.url?.endsWith('agent-card.json') === true) {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify(card('via-b', [a2aInterface(`${b.url}/rpc`)])))
        return
      }
      answerCompleted(res, body, 'A')
    })
    a = await serve((req, res, body) => {
      const path = req.url ?? ''
      const section = path.split('/')[1] ?? ''
      if (path.endsWith('agent-card.json')) {
        if (section === 'card-moved' && !path.startsWith('/card-moved/slash/')) {
          // within the origin (and the configured path): followed
          res.writeHead(302, { location: '/card-moved/slash/.well-known/agent-card.json' })
          res.end()
          return
        }
        if (section === 'card-redirect') {
          res.writeHead(302, { location: `${b.url}/.well-known/agent-card.json` })
          res.end()
          return
        }
        const interfaces = section === 'only-b'
          ? [a2aInterface(`${b.url}/only-b/rpc`)]
          : section === 'moved-outside'
            // moved to A, this path is outside the configured /moved-outside/
            ? [a2aInterface(`${b.url}/rpc`)]
          : section === 'outside-path'
            ? [a2aInterface(`${a.url}/elsewhere/rpc`), a2aInterface(`${a.url}/outside-path-evil/rpc`, 'HTTP+JSON')]
          : section === 'mixed'
            // the SDK would take the first JSON-RPC one: outside the configured path
            ? [a2aInterface(`${a.url}/admin/rpc`), a2aInterface(`${a.url}/mixed-evil/rpc`), a2aInterface(`${a.url}/mixed/rpc`)]
          : path.startsWith('/card-moved/slash/')
            ? [a2aInterface(`${a.url}/card-moved/slash/rpc`)]
          : section === 'b-first'
            // the SDK would take the JSON-RPC interface on B (and one of a version the bridge does not speak)
            ? [a2aInterface(`${b.url}/rpc`), a2aInterface(`${b.url}/old`, 'JSONRPC', '0.3'), a2aInterface('rpc', 'HTTP+JSON')]
            : [a2aInterface(`${a.url}/${section}/rpc`)]
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify(card(section, interfaces)))
        return
      }
      hitsA.push(`${req.method ?? ''} ${path}`)
      if (path.startsWith('/card-moved/slash/') && !path.endsWith('/')) {
        // a server that adds the trailing slash (a mounted app): the same origin
        res.writeHead(307, { location: `${path}/` })
        res.end()
        return
      }
      if (section === 'loop') {
        res.writeHead(307, { location: `${path}x` })
        res.end()
        return
      }
      if (section === 'rpc-redirect') {
        res.writeHead(307, { location: `${b.url}/rpc` })
        res.end()
        return
      }
      if (section === 'b-first') {
        // the HTTP+JSON binding: POST /message:send
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ task: { id: 't1', contextId: 'c', status: { state: 'TASK_STATE_COMPLETED', timestamp: new Date().toISOString() }, artifacts: [{ artifactId: 'r', name: 'r', parts: [{ data: { by: 'A' } }] }], history: [] } }))
        return
      }
      answerCompleted(res, body, 'A')
    })
  })
  afterAll(async () => {
    a?.server.closeAllConnections(); a?.server.close()
    b?.server.closeAllConnections(); b?.server.close()
    await stopAll(nodes)
  })

  it('takes the path of a card\'s interface named only at another origin to the configured one, and sends nothing there', async () => {
    hitsB.length = 0
    hitsA.length = 0
    const agent = await new A2aOutbound(nodes[3]!, silentLogger()).add(`${a.url}/only-b`)
    // B's interface is /only-b/rpc: used at A
    expect(agent.card.supportedInterfaces.map(i => i.url)).toEqual([`${a.url}/only-b/rpc`])
    const ended = await runThroughBridge(nodes[0]!, nodes[3]!, agent, 'only-b')
    expect(ended.state, ended.failure).toBe('completed')
    expect(hitsA.some(h => h.startsWith('POST /only-b/rpc'))).toBe(true)
    expect(hitsB).toEqual([])
  })

  it('follows a redirect within the configured origin, of the card and of a call', async () => {
    hitsB.length = 0
    hitsA.length = 0
    const agent = await new A2aOutbound(nodes[4]!, silentLogger()).add(`${a.url}/card-moved`)
    expect(agent.card.supportedInterfaces.map(i => i.url)).toEqual([`${a.url}/card-moved/slash/rpc`])
    const ended = await runThroughBridge(nodes[0]!, nodes[4]!, agent, 'slash')
    expect(ended.state, ended.failure).toBe('completed')
    // the delegation went on to the slashed path, with its body (a 307 keeps both)
    expect(hitsA).toContain('POST /card-moved/slash/rpc')
    expect(hitsA).toContain('POST /card-moved/slash/rpc/')
    expect(hitsB).toEqual([])
  })

  it('gives up a call redirected within the origin more than A2A_REDIRECTS_MAX times', async () => {
    hitsA.length = 0
    const agent = await new A2aOutbound(nodes[5]!, silentLogger()).add(`${a.url}/loop`)
    const ended = await runThroughBridge(nodes[0]!, nodes[5]!, agent, 'loop')
    expect(ended.state).toBe('failed')
    expect(ended.failure).toContain('redirect (HTTP 307)')
    expect(hitsA.filter(h => h.startsWith('POST /loop/rpc')).length).toBe(A2A_REDIRECTS_MAX + 1)
  })

  it('keeps only the interfaces at the configured origin: the delegation goes to A, never to B', async () => {
    hitsB.length = 0
    hitsA.length = 0
    const agent = await new A2aOutbound(nodes[1]!, silentLogger()).add(`${a.url}/b-first`)
    expect(agent.card.supportedInterfaces.map(i => i.url)).toEqual([`${a.url}/b-first/rpc`])
    const ended = await runThroughBridge(nodes[0]!, nodes[1]!, agent, 'b-first')
    expect(ended.state, ended.failure).toBe('completed')
    expect(ended.output).toEqual({ artifacts: [{ artifact_id: 'r', name: 'r', parts: [{ data: { by: 'A' } }] }] })
    expect(hitsA.length).toBeGreaterThan(0)
    expect(hitsB).toEqual([])
  })

  it('refuses a card whose interfaces at the configured origin are all outside the configured path (a sibling by prefix too)', async () => {
    hitsA.length = 0
    const err = await rejectsWith(new A2aOutbound(nodes[6]!, silentLogger()).add(`${a.url}/outside-path`), 'INVALID_REQUEST')
    expect(err.message).toContain('2 of them at paths outside /outside-path/')
    expect(hitsA).toEqual([])
  })

  it('refuses a card whose interfaces, moved from another origin, land outside the configured path', async () => {
    hitsA.length = 0
    hitsB.length = 0
    const err = await rejectsWith(new A2aOutbound(nodes[6]!, silentLogger()).add(`${a.url}/moved-outside`), 'INVALID_REQUEST')
    expect(err.message).toContain('outside /moved-outside/')
    expect(hitsA).toEqual([])
    expect(hitsB).toEqual([])
  })

  it('keeps only the interface under the configured path: the delegation goes there, not to another path of the origin', async () => {
    hitsA.length = 0
    const agent = await new A2aOutbound(nodes[6]!, silentLogger()).add(`${a.url}/mixed`)
    expect(agent.card.supportedInterfaces.map(i => i.url)).toEqual([`${a.url}/mixed/rpc`])
    const ended = await runThroughBridge(nodes[0]!, nodes[6]!, agent, 'mixed')
    expect(ended.state, ended.failure).toBe('completed')
    expect(hitsA.length).toBeGreaterThan(0)
    expect(hitsA.every(h => h.startsWith('POST /mixed/rpc'))).toBe(true)
  })

  it('does not follow a redirect of the card (INVALID_REQUEST naming the redirect)', async () => {
    hitsB.length = 0
    const err = await rejectsWith(new A2aOutbound(nodes[1]!, silentLogger()).add(`${a.url}/card-redirect`), 'INVALID_REQUEST')
    expect(err.message).toContain('redirect (HTTP 302)')
    expect(hitsB).toEqual([])
  })

  it('does not resend a delegation the server redirects (307) elsewhere: the run fails naming the redirect', async () => {
    hitsB.length = 0
    const agent = await new A2aOutbound(nodes[2]!, silentLogger()).add(`${a.url}/rpc-redirect`)
    const ended = await runThroughBridge(nodes[0]!, nodes[2]!, agent, 'rpc-redirect')
    expect(ended.state).toBe('failed')
    expect(ended.failure).toContain('redirect (HTTP 307)')
    expect(hitsB).toEqual([])
  })
})
