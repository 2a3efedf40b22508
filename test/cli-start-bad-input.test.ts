/**
 * `aap-mesh start` given what an operator gets wrong: an address that is not
 * a multiaddr, a data directory another node holds, a disk that refuses the
 * new key. Each is one clear line on stderr and a non-zero exit, never a
 * stack trace, and leaves nothing behind in the data directory.
 */
import { spawn } from 'node:child_process'
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { LOOPBACK, MAIN, NodeProc, TempDirs, cli, root } from './cli-helpers.ts'

describe('aap-mesh start with bad input', () => {
  const dirs = new TempDirs()
  const nodes: NodeProc[] = []
  afterAll(async () => {
    await Promise.all(nodes.map(async n => n.stop('SIGKILL')))
    await dirs.cleanup()
  })

  it.each([
    ['--announce', '1.2.3.4:4001'],
    ['--announce', 'garbage'],
    ['--bootstrap', '127.0.0.1:4001'],
    ['--listen', '/ip4/127.0.0.1/tcp/99999']
  ])('%s %s is a usage error (exit 2, one line) before anything starts', async (option, value) => {
    const dir = await dirs.make()
    const r = await cli(['start', '--data-dir', dir, ...LOOPBACK, '--api-port', '0', '--log-level', 'warn', option, value])
    expect(r.code, r.stderr).toBe(2)
    expect(r.stderr).toContain(`${option} ${value} is not a multiaddr`)
    expect(r.stderr).not.toMatch(/^\s+at /m)
    expect(r.stdout).toBe('')
    // no node ran: no key, no datastore, no API files
    expect(await readdir(dir)).toEqual([])
  }, 60_000)

  it('a second node on a data directory in use names the node that holds it', async () => {
    const dir = await dirs.make()
    const first = new NodeProc(dir, [])
    nodes.push(first)
    await first.started()
    const r = await cli(['start', '--data-dir', dir, ...LOOPBACK, '--api-port', '0', '--log-level', 'warn'])
    expect(r.code).toBe(1)
    expect(r.stderr.trim()).toBe(`aap-mesh: could not start: another node (pid ${first.proc.pid}) holds the data directory ${dir}: stop it, or give this node a --data-dir of its own`)
    // the first node is untouched
    expect((await first.cli(['card', 'show', '--json'])).code).toBe(0)
  }, 60_000)

  it('a disk that refuses the new key leaves no temporary key file behind', async () => {
    const dir = await dirs.make()
    // a file size limit of 0 makes every write fail (EFBIG), as a full disk does
    const child = spawn('sh', ['-c', 'ulimit -f 0; exec "$0" "$@"', process.execPath, MAIN, 'start', '--data-dir', dir, ...LOOPBACK, '--no-api', '--log-level', 'warn'],
      { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] })
    let err = ''
    child.stderr.setEncoding('utf8').on('data', (s: string) => { err += s })
    const code = await new Promise<number | null>(resolve => child.on('exit', resolve))
    expect(code, err).toBe(1)
    expect(err).toContain(`could not start: cannot write the node key ${join(dir, 'peer.key')}`)
    expect(await readdir(dir)).toEqual([])
  }, 60_000)
})
