/**
 * Exit statuses of the commands that wait or touch files: `send` succeeds
 * only when its run completed, `events --follow --until` only when the event
 * came, and `artifact put` / `artifact get` refuse a directory before
 * anything is sent. Real `start` processes; the agent beside B is this test.
 */
import { mkdir, readdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient, ApiUnreachableError } from '../src/api/client.ts'
import { data, Stream } from './api-helpers.ts'
import { NodeProc, Proc, TempDirs, type CliResult } from './cli-helpers.ts'

const CAP = 'cap:exits@1.0.0'

describe('aap-mesh exit statuses', () => {
  const dirs = new TempDirs()
  const procs: Proc[] = []
  let a: NodeProc
  let b: NodeProc
  let bId: string
  let agent: ApiClient
  let work: Stream

  beforeAll(async () => {
    a = new NodeProc(await dirs.make(), [])
    procs.push(a)
    const sa = await a.started()
    b = new NodeProc(await dirs.make(), ['--bootstrap', sa.addresses[0]!, '--name', 'exits', '--capability', CAP])
    procs.push(b)
    bId = (await b.started()).agentId
    agent = await ApiClient.fromDataDir(b.dataDir)
    work = new Stream(agent, '/v1/work/stream')
    await work.ready()
  }, 60_000)

  afterAll(async () => {
    await work?.close()
    await Promise.all(procs.map(async p => p.stop('SIGKILL')))
    await dirs.cleanup()
  })

  /** `send` to B on `task`; the test answers the run's work item with `answer`. */
  async function send (task: string, answer: (path: string) => Promise<unknown>): Promise<CliResult> {
    const sent = a.cli(['send', '--to', bId, '--capability', CAP, '--task', task, '--json'])
    const item = await work.next(e => e.event === 'work' && data(e).run.correlation_id === task, `the work of ${task}`)
    await answer(`/v1/runs/${encodeURIComponent(data(item).run.run_id as string)}`)
    return sent
  }

  it('send: a completed run exits 0', async () => {
    const r = await send('exit-done', async run => agent.call('POST', `${run}/complete`, { output: { ok: true } }))
    expect(r.code, r.stderr).toBe(0)
    expect(r.json.run).toMatchObject({ state: 'completed', output: { ok: true } })
  })

  it('send: a failed run is printed and exits 1 with its failure on stderr', async () => {
    const r = await send('exit-failed', async run => agent.call('POST', `${run}/fail`, { message: 'out of paper' }))
    expect(r.code, r.stderr).toBe(1)
    expect(r.json.run).toMatchObject({ state: 'failed', failure: { message: 'out of paper' } })
    expect(r.stderr).toMatch(new RegExp(`^aap-mesh: ${String(r.json.run.failure.code)}: run \\S+ failed: out of paper$`, 'm'))
  })

  it('send: a blocked run is printed and exits 1, saying how to resume it', async () => {
    const r = await send('exit-blocked', async run => agent.call('POST', `${run}/block`, { reason: 'which printer?', checkpoint_id: 'cp-exit' }))
    expect(r.code, r.stderr).toBe(1)
    expect(r.json.run).toMatchObject({ state: 'blocked', checkpoint_id: 'cp-exit' })
    expect(r.stderr).toContain(`aap-mesh: BLOCKED: run ${String(r.json.run.run_id)} is blocked on checkpoint cp-exit; go on with aap-mesh resume ${String(r.json.run.run_id)}`)
  })

  it('artifact put of a directory is a usage error (exit 2), not an unreachable node', async () => {
    const folder = join(await dirs.make(), 'folder')
    await mkdir(folder)
    const r = await a.cli(['artifact', 'put', folder, '--json'])
    expect(r.code, r.stderr).toBe(2)
    expect(r.json.error).toMatchObject({ code: 'INVALID_REQUEST', message: `${folder} is not a regular file: artifact put stores one file` })
  })

  it('an upload whose body fails to read throws that failure, not an unreachable node', async () => {
    const client = await ApiClient.fromDataDir(a.dataDir)
    const body = async function * (): AsyncGenerator<Uint8Array> {
      yield new Uint8Array([1, 2, 3])
      throw new Error('the file went away')
    }
    const err = await client.upload('/v1/artifacts', body(), 'application/octet-stream').then(() => undefined, (e: unknown) => e)
    expect(err).toBeInstanceOf(Error)
    expect(err).not.toBeInstanceOf(ApiUnreachableError)
    expect((err as Error).message).toBe('the file went away')
  })

  it('artifact get -o an existing directory is refused up front (exit 2) and writes nothing', async () => {
    const scratch = await dirs.make()
    const file = join(scratch, 'note.txt')
    await writeFile(file, 'hello')
    const put = await a.cli(['artifact', 'put', file, '--json'])
    expect(put.code, put.stderr).toBe(0)
    const out = join(scratch, 'out')
    await mkdir(out)
    const r = await a.cli(['artifact', 'get', String(put.json.part.artifact), '-o', out, '--json'])
    expect(r.code, r.stderr).toBe(2)
    expect(r.json.error).toMatchObject({ code: 'INVALID_REQUEST', message: `${out} is a directory: give -o the file to save the artifact as` })
    expect((await readdir(scratch)).sort()).toEqual(['note.txt', 'out'])
    expect(await readdir(out)).toEqual([])
  })

  it('events --follow --until exits 3 when the node stops before the event', async () => {
    const c = new NodeProc(await dirs.make(), [])
    procs.push(c)
    await c.started()
    const follow = new Proc(process.execPath, [new URL('../src/cli/main.ts', import.meta.url).pathname, 'events', '--follow', 'task-never', '--until', 'run.completed', '--data-dir', c.dataDir])
    procs.push(follow)
    await new Promise<void>((resolve, reject) => {
      const check = setInterval(() => {
        if (follow.stderr.includes('following task-never')) resolve()
        else if (!follow.running) reject(new Error(`events exited early: ${follow.stderr}`))
        else return
        clearInterval(check)
      }, 50)
    })
    expect(await c.stop('SIGTERM')).toEqual({ code: 0, signal: null })
    expect(await follow.exited).toEqual({ code: 3, signal: null })
    expect(follow.stderr).toContain('aap-mesh: UNREACHABLE: the node\'s event stream of task-never ended before a run.completed event')
  }, 60_000)
})
