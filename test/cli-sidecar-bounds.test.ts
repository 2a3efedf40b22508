/**
 * Remote commands against a sidecar that misbehaves (a wrong --api-url, a
 * proxy, a node with a bug). A small HTTP server plays the node:
 * - `runs list --all` and `artifact ls --all` followed a cursor the node
 *   handed back again forever; they now stop with exit 3;
 * - an SSE event that never ends was buffered without a bound (and rescanned
 *   from its start on every chunk): past API_CLIENT_SSE_EVENT_MAX_CHARS the
 *   stream fails, exit 3;
 * - a JSON answer was read whole whatever its size: one declared past
 *   API_CLIENT_ANSWER_MAX_BYTES fails at once, exit 3.
 * Before, each of these ran until the test's own timeout.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { cli } from './cli-helpers.ts'

let server: Server | undefined
afterEach(async () => {
  server?.closeAllConnections()
  await new Promise<void>(resolve => server === undefined ? resolve() : server.close(() => { resolve() }))
  server = undefined
})

async function serve (handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<string> {
  const s = createServer(handler)
  server = s
  await new Promise<void>(resolve => s.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`
}

describe('a misbehaving sidecar', () => {
  it('runs list --all stops when the node hands out a cursor again', async () => {
    let requests = 0
    const url = await serve((_req, res) => {
      requests++
      res.writeHead(200, { 'content-type': 'application/json' })
      // c1, c2, c1, ...: a loop, not just one cursor repeated
      res.end(JSON.stringify({ executing: [], delegated: [], next_cursor: requests % 2 === 1 ? 'c1' : 'c2', counts: null }))
    })
    const r = await cli(['runs', 'list', '--all', '--api-url', url, '--token', 'x'])
    expect(r.code, r.stderr).toBe(3)
    expect(r.stderr).toMatch(/handed out the cursor c1 again after 3 page\(s\)/)
    expect(requests).toBe(3)
  }, 20_000)

  it('artifact ls --all stops when the node hands out a cursor again', async () => {
    const url = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ artifacts: [], next_cursor: 'same', used_bytes: 0, max_bytes: 1, count: 0, max_count: 1 }))
    })
    const r = await cli(['artifact', 'ls', '--all', '--json', '--api-url', url, '--token', 'x'])
    expect(r.code, r.stderr).toBe(3)
    expect(r.json.error.message).toMatch(/handed out the cursor same again/)
  }, 20_000)

  it('events --follow fails an event that grows past its bound without an end', async () => {
    const piece = 'x'.repeat(64 * 1024)
    let sent = 0
    const url = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('event: ready\ndata: {}\n\n')
      res.write('data: "')
      // 8 MiB (far past the bound, API_CLIENT_SSE_EVENT_MAX_CHARS), then the connection stays open: only the bound ends the command
      const more = (): void => {
        while (sent < 8 * 1024 * 1024) {
          sent += piece.length
          if (!res.write(piece)) { res.once('drain', more); return }
        }
      }
      more()
    })
    const r = await cli(['events', 't', '--follow', '--api-url', url, '--token', 'x'])
    expect(r.code, r.stderr).toBe(3)
    expect(r.stderr).toMatch(/UNREACHABLE: the node's event stream sent an event over \d+ characters/)
  }, 20_000)

  it('a JSON answer declared past its bound fails at once', async () => {
    const url = await serve((_req, res) => {
      // 1 GiB, far past API_CLIENT_ANSWER_MAX_BYTES
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(1024 * 1024 * 1024) })
      // a start, then nothing: read whole, this would wait for the rest
      res.write('{"executing":[')
    })
    const r = await cli(['runs', 'list', '--api-url', url, '--token', 'x'])
    expect(r.code, r.stderr).toBe(3)
    expect(r.stderr).toMatch(/answered with a body over \d+ bytes/)
  }, 20_000)
})
