/**
 * Paths under /ui are the view's own routes, which skip the bearer check (each
 * checks the session itself). No spelling of a path that starts with /ui (dot
 * segments, escaped slashes, backslashes, a fragment, an absolute URL, upper
 * case) may reach an API operation without the token. Raw sockets, so each
 * path reaches the server exactly as written.
 */
import { connect } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import type { MeshNode } from '../src/node.ts'
import { startMesh, stopAll } from './helpers.ts'

/** One GET with `target` as the request line's target, exactly as given; the whole response. */
async function rawGet (port: number, target: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1')
    let out = ''
    s.setEncoding('utf8')
    s.on('data', (d: string) => { out += d })
    s.on('end', () => { resolve(out) })
    s.on('error', reject)
    s.write(`GET ${target} HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\nconnection: close\r\n\r\n`)
  })
}

describe('paths under /ui never reach an API operation without the token', () => {
  let nodes: MeshNode[]
  let api: ApiServer
  const token = newToken()

  beforeAll(async () => {
    nodes = await startMesh(1)
    api = await startApiServer(nodes[0]!, { token, port: 0 })
  })

  afterAll(async () => {
    await api.close()
    await stopAll(nodes)
  })

  it('refuses every spelling of a /ui path that leads elsewhere', async () => {
    const port = Number(new URL(api.url).port)
    const targets = [
      '/ui/../v1/node', '/ui/%2e%2e/v1/node', '/ui/..%2fv1/node', '/ui/..%2Fv1/node', '/ui//../v1/node',
      '/ui;/../v1/node', '/ui%2f..%2fv1/node', '/ui/../v1/runs?x=1', `http://127.0.0.1:${port}/ui/../v1/node`,
      '/ui#/../../v1/node', '/ui/..\\v1/node', '/UI/../v1/node', '/ui/./../v1/node',
      '/ui/assets/../../v1/node', '/ui/assets/..%2f..%2fv1%2fnode', '/ui/login/../../v1/runs'
    ]
    for (const t of targets) {
      const res = await rawGet(port, t)
      const status = Number(res.split(' ')[1])
      expect([401, 404], `${t} -> ${res.slice(0, 200)}`).toContain(status)
      expect(res, t).not.toContain('"agent_id"')
      expect(res, t).not.toContain('"executing"')
    }
    // and the token still opens the real route
    const ok = await fetch(`${api.url}/v1/node`, { headers: { authorization: `Bearer ${token}` } })
    expect(ok.status).toBe(200)
  })
})
