/**
 * Where a remote command finds its node: AAP_MESH_API_URL in the environment
 * beat an explicit --data-dir and got that directory's token, a token issued
 * by another node. Now a --data-dir on the command line names the node (the
 * environment's URL and token are left out), and a URL and a token always
 * come as a pair from one place: one without the other is a usage error
 * (exit 2), never completed from the data directory. Two small HTTP servers
 * play the nodes and record who asked them with which token.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { cli, TempDirs } from './cli-helpers.ts'

describe('the node a remote command drives', () => {
  const dirs = new TempDirs()
  const seen: Array<{ server: string, auth: string | undefined }> = []
  const servers: Server[] = []
  const urls: string[] = []
  let dir: string
  beforeAll(async () => {
    for (const name of ['named-node', 'env-node']) {
      const s = createServer((req, res) => {
        seen.push({ server: name, auth: req.headers.authorization })
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ executing: [], delegated: [], next_cursor: null, counts: null }))
      })
      await new Promise<void>(resolve => s.listen(0, '127.0.0.1', resolve))
      servers.push(s)
      urls.push(`http://127.0.0.1:${(s.address() as AddressInfo).port}`)
    }
    dir = await dirs.make()
    await writeFile(join(dir, 'api.json'), JSON.stringify({ url: urls[0] }) + '\n', { mode: 0o600 })
    await writeFile(join(dir, 'api-token'), 'token-of-named-node\n', { mode: 0o600 })
  })
  beforeEach(() => { seen.length = 0 })
  afterAll(async () => {
    for (const s of servers) await new Promise<void>(resolve => s.close(() => { resolve() }))
    await dirs.cleanup()
  })

  it('an explicit --data-dir beats AAP_MESH_API_URL: its own URL gets its own token', async () => {
    const r = await cli(['runs', 'list', '--data-dir', dir, '--json'], { AAP_MESH_API_URL: urls[1]! })
    expect(r.code, r.stderr).toBe(0)
    expect(seen).toEqual([{ server: 'named-node', auth: 'Bearer token-of-named-node' }])
    expect(r.stderr).toMatch(/AAP_MESH_API_URL from the environment left out/)
  }, 20_000)

  it('...and AAP_MESH_API_URL with AAP_MESH_TOKEN as well', async () => {
    const r = await cli(['runs', 'list', '--data-dir', dir, '--json'], { AAP_MESH_API_URL: urls[1]!, AAP_MESH_TOKEN: 'env-token' })
    expect(r.code, r.stderr).toBe(0)
    expect(seen).toEqual([{ server: 'named-node', auth: 'Bearer token-of-named-node' }])
  }, 20_000)

  it('without --data-dir on the command line the environment\'s pair is used', async () => {
    const r = await cli(['runs', 'list', '--json'], { AAP_MESH_API_URL: urls[1]!, AAP_MESH_TOKEN: 'env-token' })
    expect(r.code, r.stderr).toBe(0)
    expect(seen).toEqual([{ server: 'env-node', auth: 'Bearer env-token' }])
  }, 20_000)

  it('a URL without a token is not completed with the data directory\'s token: exit 2, nothing sent', async () => {
    const [flag, env] = await Promise.all([
      cli(['runs', 'list', '--api-url', urls[1]!, '--data-dir', dir, '--json']),
      cli(['runs', 'list', '--json'], { AAP_MESH_API_URL: urls[1]! })
    ])
    for (const r of [flag, env]) {
      expect(r.code, r.stderr).toBe(2)
      expect(r.stderr).toMatch(/--api-url and --token go together/)
    }
    expect(seen).toEqual([])
  }, 20_000)
})
