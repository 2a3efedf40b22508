/**
 * How the waiting commands (send, events --follow) end when the node does not
 * give them what they wait for. A small HTTP server plays the node:
 * - the node stops, or dies, after `send` delegated: send names the run it
 *   delegated and its last known state and exits 3 (it printed only "cannot
 *   reach the node's API" or undici's "terminated", exit 1, the run lost);
 * - a node that dies mid-stream ends `events --follow --until` with exit 3,
 *   and a plain `events --follow` whose stream the node ends exits 3 with a
 *   line on stderr (it exited 0, as if the operator had stopped it);
 * - Ctrl-C before the node answered the stream exits 130 (an AbortError,
 *   exit 1, before), and SIGTERM ends send's wait like SIGINT.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { cli, MAIN, Proc } from './cli-helpers.ts'

const RUN = {
  run_id: 'run-wait-1', state: 'running', agent_id: 'A', correlation_id: 't1', capability: { capability_id: 'cap:x', version: '1.0.0' },
  delegator: 'D', created_at: '2026-01-01T00:00:00Z', updated_at: '2026-01-01T00:00:00Z', parent_run: null, handoff_from: null, handoff_to: null,
  output: null, failure: null
}
const SEND = ['send', '--capability', 'cap:x@1.0.0', '--to', 'A', '--task', 't1', '--json']

let server: Server | undefined
afterEach(async () => {
  server?.closeAllConnections()
  await new Promise<void>(resolve => server === undefined || !server.listening ? resolve() : server.close(() => { resolve() }))
  server = undefined
})

async function node (handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<string> {
  const s = createServer(handler)
  server = s
  await new Promise<void>(resolve => s.listen(0, '127.0.0.1', resolve))
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`
}

function answer (res: ServerResponse, body: unknown, then?: () => void): void {
  res.writeHead(200, { 'content-type': 'application/json' })
  res.end(JSON.stringify(body), then)
}

function openStream (res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  res.write('event: ready\ndata: {}\n\n')
}

describe('send when the node goes away during the wait', () => {
  it('the node stops cleanly: exit 3, the delegated run named with its last state (--json too)', async () => {
    let stream: ServerResponse | undefined
    const url = await node((req, res) => {
      if (req.method === 'POST') {
        req.resume()
        // the node stops once the run is delegated: its streams end, then it is gone
        answer(res, { run: RUN }, () => {
          stream?.end(() => {
            server?.close()
            server?.closeAllConnections()
          })
        })
        return
      }
      stream = res
      openStream(res)
    })
    const r = await cli([...SEND, '--api-url', url, '--token', 'x'])
    expect(r.code, r.stderr).toBe(3)
    expect(r.json).toMatchObject({ run: { run_id: 'run-wait-1', state: 'running' } })
    expect(r.stderr).toMatch(/UNREACHABLE: the node's event stream ended while run run-wait-1 is running/)
  }, 20_000)

  it('the node dies mid-stream: exit 3 with the run, not INTERNAL "terminated"', async () => {
    let stream: ServerResponse | undefined
    const url = await node((req, res) => {
      if (req.method === 'POST') {
        req.resume()
        answer(res, { run: RUN }, () => { stream?.socket?.destroy() })
        return
      }
      if (req.url?.includes('/stream') === true) {
        stream = res
        openStream(res)
        return
      }
      // asked again after the cut: the run is still running
      answer(res, { run: RUN })
    })
    const r = await cli([...SEND, '--api-url', url, '--token', 'x'])
    expect(r.code, r.stderr).toBe(3)
    expect(r.json).toMatchObject({ run: { run_id: 'run-wait-1' } })
    expect(r.stderr).toMatch(/UNREACHABLE: the node's event stream ended while run run-wait-1 is running: the node's event stream was cut/)
    expect(r.stderr).not.toMatch(/INTERNAL/)
  }, 20_000)

  it('SIGTERM during the wait ends it like SIGINT: the run is printed, exit 130', async () => {
    let delegated: () => void = () => {}
    const posted = new Promise<void>(resolve => { delegated = resolve })
    const url = await node((req, res) => {
      if (req.url?.includes('/stream') === true) {
        openStream(res)
        return
      }
      req.resume()
      answer(res, { run: RUN })
      if (req.method === 'POST') delegated()
    })
    const p = new Proc(process.execPath, [MAIN, ...SEND, '--api-url', url, '--token', 'x'])
    await posted
    p.proc.kill('SIGTERM')
    const { code, signal } = await p.exited
    expect({ code, signal }).toEqual({ code: 130, signal: null })
    expect(p.text.join('\n')).toContain('run-wait-1')
    expect(p.stderr).toMatch(/INTERRUPTED: stopped waiting; run run-wait-1 is running/)
  }, 20_000)
})

describe('events --follow when the node ends the stream', () => {
  it('--until: a node killed mid-stream exits 3, not 1 (INTERNAL terminated)', async () => {
    const url = await node((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('event: ready\ndata: {}\n\n', () => { res.socket?.destroy() })
    })
    const r = await cli(['events', 't', '--follow', '--until', 'run.completed', '--api-url', url, '--token', 'x'])
    expect(r.code, r.stderr).toBe(3)
    expect(r.stderr).toMatch(/UNREACHABLE: the node's event stream was cut/)
  }, 20_000)

  it('plain --follow: the node ending the stream exits 3 and says so', async () => {
    const url = await node((_req, res) => {
      openStream(res)
      res.end('event: run.progress\ndata: {"run_id":"r","seq":1,"type":"run.progress","at":"2026-01-01T00:00:00Z","payload":{}}\n\n')
    })
    const r = await cli(['events', 't', '--follow', '--api-url', url, '--token', 'x'])
    expect(r.code, r.stderr).toBe(3)
    expect(r.stdout).toContain('r#1  run.progress')
    expect(r.stderr).toMatch(/UNREACHABLE: the node's event stream of t ended \(did the node stop\?\)/)
  }, 20_000)
})

describe('Ctrl-C before the node answered the stream', () => {
  for (const args of [['events', 't', '--follow', '--until', 'run.completed'], ['send', '--capability', 'cap:x@1.0.0', '--to', 'A', '--task', 't']]) {
    it(`${args[0]}: exit 130, INTERRUPTED`, async () => {
      let arrived: () => void = () => {}
      const got = new Promise<void>(resolve => { arrived = resolve })
      // a wedged node: it takes the request and never answers
      const url = await node((req) => { req.resume(); arrived() })
      const p = new Proc(process.execPath, [MAIN, ...args, '--api-url', url, '--token', 'x'])
      await got
      p.proc.kill('SIGINT')
      const { code } = await p.exited
      expect(code, p.stderr).toBe(130)
      expect(p.stderr).toMatch(/INTERRUPTED/)
    }, 20_000)
  }
})
