/**
 * `aap-mesh start` meeting signals the way a terminal or a service manager
 * sends them. Ctrl-C and systemd's KillMode=control-group signal the whole
 * process group; under bin/aap-mesh.mjs's hand-over to the pinned Node the
 * launcher passes the signal on as well, so the node gets it twice. That is
 * one request to stop: the node stops cleanly. A second, different signal
 * still ends it at once.
 */
import { spawn } from 'node:child_process'
import { readdir } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { LOOPBACK, NodeProc, TempDirs, cli, root } from './cli-helpers.ts'

const BIN = join(root, 'bin/aap-mesh.mjs')

describe('aap-mesh start and signals', () => {
  const dirs = new TempDirs()
  const kills: Array<() => void> = []
  afterAll(async () => {
    for (const kill of kills) kill()
    await dirs.cleanup()
  })

  it.each(['SIGINT', 'SIGTERM'] as const)('%s to the whole process group under the bin launcher\'s hand-over stops the node cleanly', async (sig) => {
    const dir = await dirs.make()
    // AAP_MESH_REEXEC=1 takes the hand-over path, as a system Node < 22 does; detached: a process group of its own, like a terminal job
    const child = spawn(process.execPath, [BIN, 'start', '--data-dir', dir, ...LOOPBACK, '--api-port', '0', '--log-level', 'info'],
      { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: { ...process.env, AAP_MESH_REEXEC: '1' } })
    const group = child.pid ?? 0
    kills.push(() => { try { process.kill(-group, 'SIGKILL') } catch (err) { expect((err as NodeJS.ErrnoException).code).toBe('ESRCH') } })
    let out = ''
    let err = ''
    const started = Promise.withResolvers<void>()
    child.stdout.setEncoding('utf8').on('data', (s: string) => {
      out += s
      if (out.includes('"event":"started"')) started.resolve()
    })
    child.stderr.setEncoding('utf8').on('data', (s: string) => { err += s })
    const exited = new Promise<{ code: number | null, signal: string | null }>(resolve => child.on('exit', (code, signal) => { resolve({ code, signal }) }))
    await Promise.race([started.promise, exited.then(e => { throw new Error(`exited ${JSON.stringify(e)} before started:\n${err}`) })])
    // the node serves: its start-up work is done, so each delivery of the signal reaches it on its own
    // (two deliveries of one signal while a busy process is not scheduled merge into one in the kernel)
    expect((await cli(['card', 'show', '--data-dir', dir, '--json'])).code).toBe(0)
    // one signal to every process of the group, as Ctrl-C sends it
    process.kill(-group, sig)
    expect(await exited).toEqual({ code: 0, signal: null })
    expect(out).toContain('"event":"stopped"')
    expect(err).not.toContain('exiting without a clean stop')
    const left = await readdir(dir)
    expect(left).not.toContain('api.json')
    expect(left).not.toContain('api-token')
  }, 60_000)

  it('a second, different signal while the node stops ends it at once (exit 130)', async () => {
    const dir = await dirs.make()
    const node = new NodeProc(dir, [])
    kills.push(() => { node.proc.kill('SIGKILL') })
    await node.started()
    node.proc.kill('SIGTERM')
    node.proc.kill('SIGINT')
    expect(await node.exited).toEqual({ code: 130, signal: null })
    // both are pending at once: the process may take them in either order
    expect(node.stderr).toMatch(/SIG(INT|TERM) again: exiting without a clean stop/)
  }, 60_000)

  it('Ctrl-C to the group under the launcher ends `events --follow --until` with its INTERRUPTED line, not a kill', async () => {
    const node = new NodeProc(await dirs.make(), [])
    kills.push(() => { node.proc.kill('SIGKILL') })
    await node.started()
    const child = spawn(process.execPath, [BIN, 'events', '--follow', 'task-never', '--until', 'run.completed', '--data-dir', node.dataDir],
      { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: { ...process.env, AAP_MESH_REEXEC: '1' } })
    const group = child.pid ?? 0
    kills.push(() => { try { process.kill(-group, 'SIGKILL') } catch (err) { expect((err as NodeJS.ErrnoException).code).toBe('ESRCH') } })
    let err = ''
    const following = Promise.withResolvers<void>()
    child.stderr.setEncoding('utf8').on('data', (s: string) => {
      err += s
      if (err.includes('following task-never')) following.resolve()
    })
    const exited = new Promise<{ code: number | null, signal: string | null }>(resolve => child.on('exit', (code, signal) => { resolve({ code, signal }) }))
    await Promise.race([following.promise, exited.then(e => { throw new Error(`exited ${JSON.stringify(e)} before following:\n${err}`) })])
    process.kill(-group, 'SIGINT')
    expect(await exited).toEqual({ code: 130, signal: null })
    expect(err).toContain('INTERRUPTED: stopped following task-never')
  }, 60_000)
})
