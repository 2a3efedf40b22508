/**
 * `aap-mesh start` and what it was not careful about:
 * - --executor-lost-after took 1 ms: one missed liveness probe failed live runs
 *   with EXECUTOR_LOST. Below one probe interval and one probe's timeout it is
 *   now a usage error (exit 2) naming the floor;
 * - a failure once the node is up (the API port taken) went to the log only:
 *   with --log-level silent the exit 1 said nothing. It is said on stderr;
 * - a data directory or node key open to the group or others was used
 *   silently: a warning now says so (the node still starts);
 * - SIGTERM while the API files were being written left them (or their
 *   temporary file) behind: the stop waits for the write and removes them.
 */
import { execFileSync } from 'node:child_process'
import { chmod, constants, mkdir, open, readdir } from 'node:fs/promises'
import { connect, createServer, type Server } from 'node:net'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { cli, LOOPBACK, MAIN, Proc, TempDirs } from './cli-helpers.ts'
import { freePort, until } from './helpers.ts'

const dirs = new TempDirs()
afterAll(async () => { await dirs.cleanup() })

async function accepts (port: number): Promise<boolean> {
  return new Promise(resolve => {
    const c = connect(port, '127.0.0.1')
    c.once('connect', () => { c.destroy(); resolve(true) })
    c.once('error', () => { resolve(false) })
  })
}

/** The process's first outcome: its `started` line, or its exit. */
async function outcome (p: Proc): Promise<'started' | 'exited'> {
  return Promise.race([p.event('started').then(() => 'started' as const, () => 'exited' as const), p.exited.then(() => 'exited' as const)])
}

describe('start: arguments and failures', () => {
  it('--executor-lost-after below one probe interval and timeout is refused with exit 2', async () => {
    const dir = await dirs.make()
    const p = new Proc(process.execPath, [MAIN, 'start', '--data-dir', dir, ...LOOPBACK, '--no-api', '--log-level', 'silent', '--executor-lost-after', '1'])
    const first = await outcome(p)
    if (first === 'started') await p.stop('SIGKILL')
    expect(first).toBe('exited')
    expect((await p.exited).code).toBe(2)
    expect(p.stderr).toMatch(/--executor-lost-after.*at least 10000 ms/s)
  }, 30_000)

  it('a failure after the node is up is said on stderr even with --log-level silent', async () => {
    const taken: Server = createServer()
    await new Promise<void>(resolve => taken.listen(0, '127.0.0.1', resolve))
    const port = (taken.address() as AddressInfo).port
    try {
      const r = await cli(['start', '--data-dir', await dirs.make(), ...LOOPBACK, '--api-port', String(port), '--log-level', 'silent'])
      expect(r.code).toBe(1)
      expect(r.stderr).toMatch(/aap-mesh: stopping: could not serve the API.*EADDRINUSE/)
    } finally {
      await new Promise<void>(resolve => taken.close(() => { resolve() }))
    }
  }, 30_000)
})

describe('start: the data directory', () => {
  it('warns when an existing data directory or its node key is open to others, and starts all the same', async () => {
    const first = await dirs.make()
    // a key made by a first start
    const made = new Proc(process.execPath, [MAIN, 'start', '--data-dir', first, ...LOOPBACK, '--no-api', '--log-level', 'silent'])
    await made.event('started')
    await made.stop('SIGTERM')
    await chmod(first, 0o755)
    await chmod(join(first, 'peer.key'), 0o644)
    const p = new Proc(process.execPath, [MAIN, 'start', '--data-dir', first, ...LOOPBACK, '--no-api', '--log-level', 'silent'])
    await p.event('started')
    await p.stop('SIGTERM')
    expect(p.stderr).toMatch(/the data directory .* is open to its group or others \(mode 0755\)/)
    expect(p.stderr).toMatch(/the node key .*peer\.key is open to its group or others \(mode 0644\)/)
    expect(made.stderr).toBe('')
  }, 60_000)

  it('SIGTERM while the API files are written: the stop waits for the write and leaves none of them', async () => {
    const dir = await dirs.make()
    await mkdir(dir, { recursive: true })
    const port = await freePort()
    const p = new Proc(process.execPath, [MAIN, 'start', '--data-dir', dir, ...LOOPBACK, '--api-port', String(port), '--log-level', 'silent'])
    // the token's temporary file is a FIFO: the write blocks in it until a reader comes, so the
    // signal comes while the write is under way
    const fifo = join(dir, `api-token.${p.proc.pid}.tmp`)
    execFileSync('mkfifo', [fifo])
    await until(async () => await accepts(port) || !p.running, 'the API to listen', 30_000)
    p.proc.kill('SIGTERM')
    // a reader lets the write go on (it fails on the FIFO: what the stop finds is a half-done write)
    const reader = await open(fifo, constants.O_RDONLY | constants.O_NONBLOCK)
    try {
      const { code } = await p.exited
      expect(code).toBe(0)
    } finally {
      await reader.close()
    }
    expect((await readdir(dir)).filter(n => n.startsWith('api'))).toEqual([])
  }, 60_000)
})
