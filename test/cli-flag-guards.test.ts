/**
 * Flags the command line took and then did something else with. Found by
 * session 59's review:
 * - `start --api-host ""` (or --metrics-host, --a2a-host) listened on every
 *   interface (an empty host is "any" to Node): a usage error now (exit 2);
 * - a host or port of a server that does not start (--metrics-host without
 *   --metrics-port, --a2a-host without --a2a-port, --api-port with --no-api)
 *   was dropped silently: a usage error now;
 * - `start --card file --capability id@v` put id@v on the card twice when the
 *   file wrote its keys in another order: capabilities compare by id@version;
 * - `card set --webhook <url>` (or --no-webhook) alone was refused ("nothing
 *   to set"): it publishes the current card again with the new webhook; one
 *   the node cannot POST to (credentials in it) is a usage error;
 * - `events <task> --until <type>` without --follow ignored --until and
 *   exited 0: a usage error now, like --no-history without --follow.
 */
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { newToken } from '../src/api/files.ts'
import { startApiServer, type ApiServer } from '../src/api/server.ts'
import { cardDraftFrom } from '../src/cli/start-args.ts'
import type { MeshNode } from '../src/node.ts'
import { cli, LOOPBACK, MAIN, Proc, TempDirs } from './cli-helpers.ts'
import { startMesh, stopAll } from './helpers.ts'

const dirs = new TempDirs()
afterAll(async () => { await dirs.cleanup() })

/** `aap-mesh start <args>`: its exit, or (a node that started after all) stopped and failed. */
async function startRefused (args: string[]): Promise<{ code: number | null, stderr: string }> {
  const p = new Proc(process.execPath, [MAIN, 'start', '--data-dir', await dirs.make(), ...LOOPBACK, '--log-level', 'silent', ...args])
  const first = await Promise.race([p.event('started').then(() => 'started' as const, () => 'exited' as const), p.exited.then(() => 'exited' as const)])
  if (first === 'started') await p.stop('SIGKILL')
  expect(first, `${args.join(' ')} started a node: ${JSON.stringify(p.lines[0])}`).toBe('exited')
  return { code: (await p.exited).code, stderr: p.stderr }
}

describe('start: hosts and ports of the servers', () => {
  for (const [args, says] of [
    [['--api-host', '', '--api-port', '0'], /--api-host.*every interface/],
    [['--api-host', '  ', '--api-port', '0'], /--api-host.*every interface/],
    [['--no-api', '--metrics-port', '0', '--metrics-host', ''], /--metrics-host.*every interface/],
    [['--no-api', '--a2a-port', '0', '--a2a-host', ''], /--a2a-host.*every interface/]
  ] as Array<[string[], RegExp]>) {
    it(`${args.map(a => JSON.stringify(a)).join(' ')}: an empty host is a usage error (exit 2), nothing listens`, async () => {
      const r = await startRefused(args)
      expect(r.stderr).toMatch(says)
      expect(r.code).toBe(2)
    }, 30_000)
  }

  for (const [args, says] of [
    [['--no-api', '--metrics-host', '127.0.0.1'], /--metrics-host needs --metrics-port/],
    [['--no-api', '--a2a-host', '127.0.0.1'], /--a2a-host needs --a2a-port/],
    [['--no-api', '--api-port', '0'], /--api-port with --no-api/],
    [['--no-api', '--api-host', '127.0.0.1'], /--api-host with --no-api/]
  ] as Array<[string[], RegExp]>) {
    it(`${args.join(' ')}: a host or port of a server that does not start is a usage error (exit 2)`, async () => {
      const r = await startRefused(args)
      expect(r.stderr).toMatch(says)
      expect(r.code).toBe(2)
    }, 30_000)
  }
})

describe('start: the card a file and flags make', () => {
  it('--capability already in the card file (keys in another order) is on the card once', async () => {
    const file = join(await dirs.make(), 'card.json')
    await writeFile(file, JSON.stringify({ name: 'twice', capabilities: [{ version: '1.0.0', capability_id: 'cap:once' }] }))
    const draft = await cardDraftFrom({ card: file, capability: ['cap:once@1.0.0', 'cap:other@2.0.0', 'cap:other@2.0.0'] })
    expect(draft?.capabilities?.map(c => `${c.capability_id}@${c.version}`)).toEqual(['cap:once@1.0.0', 'cap:other@2.0.0'])
  })
})

describe('card set and events against a node', () => {
  let nodes: MeshNode[] = []
  let api: ApiServer
  let counter: Server
  let counterUrl = ''
  let requests = 0
  const token = newToken()
  const remote = (): string[] => ['--api-url', api.url, '--token', token]

  beforeAll(async () => {
    nodes = await startMesh(1)
    api = await startApiServer(nodes[0]!, { token, port: 0, checkResponses: true })
    // counts what reaches it: a usage error sends nothing
    counter = createServer((req, res) => {
      requests++
      req.resume()
      res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { code: 'INVALID_REQUEST', message: 'the node refused it' } }))
    })
    await new Promise<void>(resolve => counter.listen(0, '127.0.0.1', resolve))
    counterUrl = `http://127.0.0.1:${(counter.address() as AddressInfo).port}`
  }, 60_000)

  afterAll(async () => {
    await new Promise<void>(resolve => counter.close(() => { resolve() }))
    await api.close()
    await stopAll(nodes)
  })

  it('card set --webhook alone keeps the card and sets the webhook; --no-webhook alone removes it', async () => {
    const set = await cli(['card', 'set', '--name', 'hooked', '--capability', 'cap:hooked@1.0.0', '--json', ...remote()])
    expect(set.code, set.stderr).toBe(0)
    const hook = 'http://127.0.0.1:8080/hook?secret=s3cret'
    const withHook = await cli(['card', 'set', '--webhook', hook, '--json', ...remote()])
    expect(withHook.stderr).toBe('')
    expect(withHook.code).toBe(0)
    expect(withHook.json).toMatchObject({ webhook: hook, card: { name: 'hooked', capabilities: [{ capability_id: 'cap:hooked', version: '1.0.0' }] } })
    const without = await cli(['card', 'set', '--no-webhook', '--json', ...remote()])
    expect(without.code, without.stderr).toBe(0)
    expect(without.json).toMatchObject({ webhook: null, card: { name: 'hooked' } })
  }, 60_000)

  it('card set --webhook with credentials in the URL is a usage error (exit 2), nothing sent', async () => {
    const before = requests
    const r = await cli(['card', 'set', '--name', 'x', '--webhook', 'http://agent:s3cret@127.0.0.1:9/hook', '--api-url', counterUrl, '--token', 'x'])
    expect(r.stderr).toMatch(/--webhook .*credentials/)
    expect(requests - before).toBe(0)
    expect(r.code).toBe(2)
  }, 30_000)

  for (const args of [['--until', 'run.completed'], ['--no-history']]) {
    it(`events ${args.join(' ')} without --follow is a usage error (exit 2), nothing sent`, async () => {
      const before = requests
      const r = await cli(['events', 't1', ...args, '--api-url', counterUrl, '--token', 'x'])
      expect(r.stderr).toMatch(new RegExp(`${args[0]} needs --follow`))
      expect(requests - before).toBe(0)
      expect(r.code).toBe(2)
    }, 30_000)
  }
})
