/**
 * Answers that are not the API's: a command read them as if they were, and
 * printed "undefined" (exit 0) or failed on a TypeError (INTERNAL, exit 1).
 * `send` hid the run it had delegated when an event of its stream was no run
 * event. Now the top-level shape of each answer is checked: one that is not
 * the API's is ApiAnswerBrokenError (exit 3), and `send` says which run it
 * delegated, as when the node's stream is cut. A small HTTP server plays the node.
 */
import { createServer, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cli } from './cli-helpers.ts'

const RUN = {
  run_id: 'run-sent', state: 'running', agent_id: 'agent-b', correlation_id: 'task-1', capability: { capability_id: 'cap:x', version: '1.0.0' },
  delegator: 'D', created_at: '2026-01-01T00:00:00Z', updated_at: '2026-01-01T00:00:00Z', parent_run: null, handoff_from: null, handoff_to: null,
  output: null, failure: null
}

describe('answers that are not the API\'s', () => {
  let server: Server
  let url: string
  let stream: ServerResponse | undefined
  beforeAll(async () => {
    server = createServer((req, res) => {
      req.resume()
      const json = (body: unknown): void => {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify(body))
      }
      if (req.headers.authorization === 'Bearer broken') {
        json({})
        return
      }
      // token "send": a node whose stream sends a bad event after the run was delegated
      const path = req.url ?? ''
      if (path.includes('/stream')) {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write('event: ready\ndata: {}\n\n')
        stream = res
      } else if (path.startsWith('/v1/delegate')) {
        json({ run: RUN })
        stream?.write('event: run.completed\ndata: null\n\n')
      } else {
        json({ run: RUN })
      }
    })
    await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(async () => {
    server.closeAllConnections()
    await new Promise<void>(resolve => server.close(() => { resolve() }))
  })

  const commands = [
    ['discover', '--capability', 'cap:x'],
    ['runs', 'list'],
    ['runs', 'show', 'run-1'],
    ['card', 'show'],
    ['artifact', 'ls'],
    ['replay', 't1'],
    ['events', 't1'],
    ['ui', '--no-open'],
    ['cancel', 'run-1']
  ]
  for (const args of commands) {
    it(`${args.join(' ')}: an answer of {} is not the API's (exit 3), not "undefined" or a TypeError`, async () => {
      const r = await cli([...args, '--api-url', url, '--token', 'broken'])
      expect(r.stderr).toContain('UNREACHABLE')
      expect(r.stderr).toContain('it is not the API\'s')
      expect(r.stdout).not.toContain('undefined')
      expect(r.code).toBe(3)
    }, 20_000)
  }

  it('send: an event that is no run event after the delegation exits 3 naming the delegated run', async () => {
    const r = await cli(['send', '--to', 'agent-b', '--capability', 'cap:x@1.0.0', '--task', 'task-1', '--api-url', url, '--token', 'send'])
    expect(r.stderr).not.toContain('INTERNAL')
    expect(r.stderr).toContain('run-sent')
    expect(r.code).toBe(3)
  }, 20_000)
})
