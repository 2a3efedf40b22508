/**
 * Text from other peers (a card's name and description, a run's failure and
 * block reasons, an executor's error message relayed by the node) reached the
 * operator's terminal raw: escape sequences could retitle the window, clear
 * the screen or forge lines. Text output now shows every control as a visible
 * escape and line breaks as spaces; --json prints the documents as they are.
 * A small HTTP server plays a node that relays such text.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cli } from './cli-helpers.ts'

const EVIL = 'nice\u001b]0;pwned\u0007\u001b[2J\r\nfake line\u009b31m\u202etxt.exe\u2066'
/** Controls that must not reach a terminal (\n ends lines the command itself writes). */
const RAW = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/

const CARD = {
  agent_id: 'agent-b', name: EVIL, description: EVIL, capabilities: [{ capability_id: 'cap:x', version: '1.0.0' }], tags: [EVIL],
  seq: 1, expires_at: '2027-01-01T00:00:00Z'
}
const RUN = {
  run_id: 'run-1', state: 'failed', agent_id: 'agent-b', correlation_id: 't1', capability: { capability_id: 'cap:x', version: '1.0.0' },
  delegator: 'D', created_at: '2026-01-01T00:00:00Z', updated_at: '2026-01-01T00:00:00Z', parent_run: null, handoff_from: null, handoff_to: null,
  output: { text: EVIL }, failure: { code: 'INTERNAL', message: EVIL }, block_reason: EVIL
}
const EVENT = { run_id: 'run-1', seq: 2, type: 'run.blocked', at: '2026-01-01T00:00:00Z', payload: { checkpoint_id: 'c1', reason: EVIL } }

describe('text from the network in text output', () => {
  let server: Server
  let url: string
  beforeAll(async () => {
    server = createServer((req, res) => {
      req.resume()
      const path = req.url ?? ''
      const json = (status: number, body: unknown): void => {
        res.writeHead(status, { 'content-type': 'application/json' })
        res.end(JSON.stringify(body))
      }
      if (path.startsWith('/v1/discover')) json(200, { cards: [CARD] })
      else if (path.startsWith('/v1/card')) json(200, { agent_id: 'agent-b', card: CARD, webhook: null, serving: [] })
      else if (path.startsWith('/v1/runs/run-1/cancel')) json(502, { error: { code: 'INTERNAL', message: `the executor said: ${EVIL}` } })
      else if (path.startsWith('/v1/runs/')) json(200, { run: RUN })
      else if (path === '/v1/runs' || path.startsWith('/v1/runs?')) json(200, { executing: [RUN], delegated: [], next_cursor: EVIL, counts: null })
      else if (path === '/v1/artifacts' || path.startsWith('/v1/artifacts?')) {
        json(200, { artifacts: [{ artifact: EVIL, size: 1, pinned: true, last_used: EVIL }], next_cursor: EVIL, used_bytes: 1, max_bytes: 2, count: 1, max_count: 2 })
      }
      else if (path.includes('/replay')) json(200, { correlation_id: 't1', runs: [], events: [EVENT], transitions: [{ kind: 'block', at: EVENT.at, run_id: 'run-1', checkpoint_id: 'c1', reason: EVIL }], forks: [], unreached: [] })
      else if (path.includes('/stream')) {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write('event: ready\ndata: {}\n\n')
        res.end(`event: run.blocked\ndata: ${JSON.stringify(EVENT)}\n\n`)
      } else json(404, { error: { code: 'NOT_FOUND', message: 'no' } })
    })
    await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(async () => { await new Promise<void>(resolve => server.close(() => { resolve() })) })

  const api = (): string[] => ['--api-url', url, '--token', 'x']

  for (const args of [['discover', '--capability', 'cap:x'], ['card', 'show'], ['runs', 'show', 'run-1'], ['replay', 't1'], ['events', 't1'], ['events', 't1', '--follow', '--until', 'run.blocked'], ['runs', 'list'], ['artifact', 'ls']]) {
    it(`${args.join(' ')}: no raw control reaches stdout, and a peer's line break forges no line`, async () => {
      const r = await cli([...args, ...api()])
      expect(r.code, r.stderr).toBe(0)
      expect(r.stdout).toContain('nice')
      expect(r.stdout).not.toMatch(RAW)
      expect(r.stdout).toContain('\\u{1b}]0;pwned\\u{7}')
      expect(r.stdout.split('\n').some(l => l.startsWith('fake line'))).toBe(false)
    }, 20_000)
  }

  it('an error message relayed from the executor reaches stderr escaped', async () => {
    const r = await cli(['cancel', 'run-1', ...api()])
    expect(r.code).toBe(1)
    expect(r.stderr).toContain('the executor said: nice')
    expect(r.stderr).not.toMatch(RAW)
    expect(r.stderr.trim().split('\n')).toHaveLength(1)
  }, 20_000)

  it('--json keeps the documents as they are (JSON escapes what a parser needs)', async () => {
    const r = await cli(['runs', 'show', 'run-1', '--json', ...api()])
    expect(r.code, r.stderr).toBe(0)
    expect(r.json.run.failure.message).toBe(EVIL)
  }, 20_000)
})
