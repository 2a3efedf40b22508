/**
 * `aap-mesh start --a2a-host` beyond loopback. The A2A server asked no
 * credential whatever address it was given, so `--a2a-host 0.0.0.0` let any
 * machine read, resume and cancel every task. Now the server there asks the
 * node's API token (`Authorization: Bearer`, <data dir>/api-token), and
 * with `--no-api` (no token) such a host is a usage error. The node's A2A
 * server is reached on 127.0.0.1 only.
 */
import { readdir, readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { LOOPBACK, NodeProc, TempDirs, cli } from './cli-helpers.ts'

describe('aap-mesh start: an A2A server beyond loopback', () => {
  const dirs = new TempDirs()
  const nodes: NodeProc[] = []
  afterAll(async () => {
    await Promise.all(nodes.map(async n => n.stop('SIGKILL')))
    await dirs.cleanup()
  })

  it('with --no-api is a usage error (exit 2, one line) before anything starts', async () => {
    const dir = await dirs.make()
    // an address of TEST-NET-1 (RFC 5737): nothing would listen on it
    const r = await cli(['start', '--data-dir', dir, ...LOOPBACK, '--no-api', '--log-level', 'warn', '--a2a-port', '0', '--a2a-host', '192.0.2.1'])
    expect(r.code, r.stderr).toBe(2)
    expect(r.stderr).toContain('--a2a-host 192.0.2.1 is not loopback')
    expect(r.stderr).not.toMatch(/^\s+at /m)
    expect(await readdir(dir)).toEqual([])
  }, 60_000)

  it('asks every request for the node\'s API token', async () => {
    const dir = await dirs.make()
    const n = new NodeProc(dir, ['--a2a-port', '0', '--a2a-host', '0.0.0.0', '--name', 'gateway'])
    nodes.push(n)
    const started = await n.event('started')
    const port = new URL(started.a2a as string).port
    const cardUrl = `http://127.0.0.1:${port}/.well-known/agent-card.json`
    const token = (await readFile(join(dir, 'api-token'), 'utf8')).trim()

    const without = await fetch(cardUrl)
    expect(without.status).toBe(401)
    expect(without.headers.get('www-authenticate')).toBe('Bearer')
    const with_ = await fetch(cardUrl, { headers: { authorization: `Bearer ${token}` } })
    expect(with_.status).toBe(200)
    const card = await with_.json() as { securitySchemes: Record<string, unknown> }
    expect(Object.keys(card.securitySchemes)).toEqual(['bearer'])
  }, 60_000)
})
