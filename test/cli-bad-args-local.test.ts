/**
 * Arguments the command can tell are wrong went to the node (and came back
 * as its refusal, exit 1) or failed as if no node answered (exit 3). Each is
 * now a usage error (exit 2) said before anything is sent: an --until that
 * is no event type, a --since that is no RFC 3339 instant, a replay
 * --timeout-ms past API_REPLAY_MAX_TIMEOUT_MS, an output file in a folder that
 * is not there, an empty id or tag, an --api-url that is no http(s) URL, a
 * --token no header can carry, a conformance target or --bootstrap that is no
 * multiaddr. A small HTTP server counts the requests that reach it.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cli, TempDirs } from './cli-helpers.ts'

describe('arguments refused before anything is sent', () => {
  const dirs = new TempDirs()
  let server: Server
  let url: string
  let requests = 0
  beforeAll(async () => {
    server = createServer((req, res) => {
      requests++
      req.resume()
      res.writeHead(400, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: { code: 'INVALID_REQUEST', message: 'the node refused it' } }))
    })
    await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(async () => {
    await new Promise<void>(resolve => server.close(() => { resolve() }))
    await dirs.cleanup()
  })

  const api = (): string[] => ['--api-url', url, '--token', 'x']

  async function refusedLocally (args: string[], says: string | RegExp): Promise<void> {
    const before = requests
    const r = await cli(args)
    expect(r.stderr).toMatch(says)
    expect(requests - before).toBe(0)
    expect(r.code).toBe(2)
  }

  it('events --follow --until of no event type lists the types', async () => {
    await refusedLocally(['events', 't1', '--follow', '--until', 'run.finished', ...api()], /run\.started, run\.progress, run\.blocked, run\.completed, run\.failed/)
  }, 20_000)

  it('runs list --since that is no RFC 3339 instant', async () => {
    await refusedLocally(['runs', 'list', '--since', 'Jan 1 2020', ...api()], /--since .*RFC 3339/)
  }, 20_000)

  it('runs list --since of a day the month has not (the node would refuse it too)', async () => {
    for (const day of ['2026-02-30T00:00:00Z', '2026-04-31T12:00:00Z', '2025-02-29T00:00:00Z']) {
      await refusedLocally(['runs', 'list', '--since', day, ...api()], /--since .*RFC 3339/)
    }
  }, 60_000)

  it('replay --timeout-ms past the API\'s bound', async () => {
    await refusedLocally(['replay', 't1', '--timeout-ms', '999999', ...api()], /60000/)
  }, 20_000)

  it('discover --timeout-ms past the API\'s bound', async () => {
    await refusedLocally(['discover', '--capability', 'cap:x', '--timeout-ms', '30001', ...api()], /30000/)
  }, 20_000)

  it('artifact get -o into a folder that is not there', async () => {
    const dir = await dirs.make()
    await refusedLocally(['artifact', 'get', 'abc', '-o', join(dir, 'missing', 'out'), ...api()], /no folder/)
  }, 20_000)

  for (const args of [['runs', 'show', ''], ['cancel', ''], ['events', ''], ['replay', ''], ['discover', '--tag', '']]) {
    it(`${args.join(' ')} (empty): an empty id or tag is refused`, async () => {
      await refusedLocally([...args, ...api()], /must not be empty/)
    }, 20_000)
  }

  it('--api-url that is no http(s) URL', async () => {
    await refusedLocally(['runs', 'list', '--api-url', 'notaurl', '--token', 'x'], /--api-url notaurl is not a URL/)
    await refusedLocally(['runs', 'list', '--api-url', 'ftp://127.0.0.1/', '--token', 'x'], /not an http or https URL/)
  }, 20_000)

  it('--token no header can carry (a line break, a character past Latin-1)', async () => {
    await refusedLocally(['runs', 'list', '--api-url', url, '--token', 'ab\ncd'], /--token/)
    await refusedLocally(['runs', 'list', '--api-url', url, '--token', 'ключ'], /--token/)
  }, 20_000)

  it('conformance: a target or --bootstrap that is no multiaddr', async () => {
    const target = await cli(['conformance', '/garbage'])
    expect(target.stderr).toMatch(/not a multiaddr/)
    expect(target.code).toBe(2)
    const boot = await cli(['conformance', '12D3KooWLRPJAA5o6Z6F1GJ3WZ6qMzgyYqGJ2nxj9CJYbY3cP7sW', '--bootstrap', 'notamultiaddr'])
    expect(boot.stderr).toMatch(/--bootstrap notamultiaddr is not a multiaddr/)
    expect(boot.code).toBe(2)
  }, 60_000)
})
