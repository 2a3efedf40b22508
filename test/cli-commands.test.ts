/**
 * Every aap-mesh command as a real process against real nodes: its --json
 * output, and at least one error path (exit code and a readable message).
 * Two `start` processes (B bootstraps off A) are shared by the whole file;
 * the agent beside B is this test, over HTTP.
 */
import { stat } from 'node:fs/promises'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { CommanderError } from 'commander'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ApiClient } from '../src/api/client.ts'
import { API_INFO_FILE, API_TOKEN_FILE, readApiFiles } from '../src/api/files.ts'
import { allCommands, buildProgram } from '../src/cli/main.ts'
import type { Run } from '../src/runlog/types.ts'
import { data, Stream } from './api-helpers.ts'
import { cli, MAIN, NodeProc, Proc, TempDirs, type CliResult } from './cli-helpers.ts'

const CAP = 'cap:cli@1.0.0'

/** A failed command: its exit code, the JSON error it printed, and the human line on stderr. */
function expectFailure (r: CliResult, exit: number, code: string, message: RegExp): void {
  expect(r.code, r.stderr).toBe(exit)
  expect(r.json?.error?.code, r.stdout).toBe(code)
  expect(r.json.error.message).toMatch(message)
  expect(r.stderr).toMatch(new RegExp(`^aap-mesh: ${code}: `, 'm'))
}

describe('aap-mesh commands against running nodes', () => {
  const dirs = new TempDirs()
  const procs: Proc[] = []
  let a: NodeProc
  let b: NodeProc
  let aId: string
  let bId: string
  let work: Stream
  let workA: Stream
  let emptyDir: string

  beforeAll(async () => {
    a = new NodeProc(await dirs.make(), [])
    procs.push(a)
    const sa = await a.started()
    aId = sa.agentId
    b = new NodeProc(await dirs.make(), ['--bootstrap', sa.addresses[0]!])
    procs.push(b)
    bId = (await b.started()).agentId
    emptyDir = await dirs.make()
  })

  afterAll(async () => {
    await work?.close()
    await workA?.close()
    await Promise.all(procs.map(async p => p.stop('SIGKILL')))
    await dirs.cleanup()
  })

  it('--help works on every command and subcommand', async () => {
    const program = buildProgram()
    const paths: string[][] = []
    const walk = (cmd: typeof program, path: string[]): void => {
      for (const sub of cmd.commands) {
        paths.push([...path, sub.name()])
        walk(sub, [...path, sub.name()])
      }
    }
    walk(program, [])
    expect(paths.map(p => p.join(' '))).toEqual(expect.arrayContaining([
      'start', 'card', 'card show', 'card set', 'discover', 'delegate', 'send', 'runs', 'runs list', 'runs show',
      'block', 'resume', 'cancel', 'handoff', 'events', 'replay'
    ]))
    for (const path of paths) {
      let out = ''
      const p = buildProgram()
      for (const c of allCommands(p)) c.exitOverride().configureOutput({ writeOut: (s) => { out += s }, writeErr: (s) => { out += s } })
      const err = await p.parseAsync(['node', 'aap-mesh', ...path, '--help']).then(() => undefined, (e: unknown) => e)
      expect(err, path.join(' ')).toBeInstanceOf(CommanderError)
      expect((err as CommanderError).exitCode, path.join(' ')).toBe(0)
      expect(out, path.join(' ')).toContain(`Usage: aap-mesh ${path.join(' ')}`)
    }
  })

  it('start: prints the API URL, keeps URL and token in the data dir (0600), and the token opens the API', async () => {
    const started = await a.event('started')
    expect(started.api).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
    for (const f of [API_INFO_FILE, API_TOKEN_FILE]) expect((await stat(join(a.dataDir, f))).mode & 0o777, f).toBe(0o600)
    const { url, token } = await readApiFiles(a.dataDir)
    expect(url).toBe(started.api)
    const node = await new ApiClient(url, token).call<{ agent_id: string }>('GET', '/v1/node')
    expect(node.agent_id).toBe(aId)
  })

  it('start: refuses a taken --api-port (exit 1, nothing left behind) and bad option values (exit 2)', async () => {
    const blocker = createServer()
    await new Promise<void>(resolve => blocker.listen(0, '127.0.0.1', resolve))
    const port = (blocker.address() as { port: number }).port
    try {
      const dir = await dirs.make()
      const taken = new Proc(process.execPath, [MAIN, 'start', '--data-dir', dir, '--listen', '/ip4/127.0.0.1/tcp/0', '--api-port', String(port)])
      expect((await taken.exited).code).toBe(1)
      expect(taken.stderr).toMatch(/EADDRINUSE/)
      expect(taken.lines.filter(l => l.event === 'started')).toEqual([])
      await expect(stat(join(dir, API_INFO_FILE))).rejects.toThrow(/ENOENT/)
    } finally {
      blocker.close()
    }
    const [level, badPort] = await Promise.all([
      cli(['start', '--data-dir', emptyDir, '--log-level', 'loud']),
      cli(['start', '--data-dir', emptyDir, '--api-port', '70000'])
    ])
    expect(level.code).toBe(2)
    expect(level.stderr).toMatch(/--log-level.*Allowed choices are fatal, error, warn, info, debug, trace, silent/s)
    expect(badPort.code).toBe(2)
    expect(badPort.stderr).toMatch(/a port is an integer from 0 to 65535/)
  })

  it('card set / card show: publish a card whose capabilities the API serves; bad values and a missing node are errors', async () => {
    const set = await b.cli(['card', 'set', '--name', 'cli-b', '--capability', CAP, '--tag', 'cli', '--json'])
    expect(set.code, set.stderr).toBe(0)
    expect(set.json).toMatchObject({ agent_id: bId, card: { name: 'cli-b', capabilities: [{ capability_id: 'cap:cli', version: '1.0.0' }], tags: ['cli'] }, serving: [{ capability_id: 'cap:cli', version: '1.0.0' }], webhook: null })
    // A serves it too, so it can receive a handoff; the current card is the base, flags add to it
    await a.cli(['card', 'set', '--name', 'cli-a', '--json'])
    const setA = await a.cli(['card', 'set', '--capability', CAP, '--json'])
    expect(setA.json.card).toMatchObject({ name: 'cli-a', capabilities: [{ capability_id: 'cap:cli', version: '1.0.0' }] })

    const [show, showText, noVersion, badTag, noNode] = await Promise.all([
      b.cli(['card', 'show', '--json']),
      b.cli(['card', 'show']),
      b.cli(['card', 'set', '--capability', 'cap:cli', '--json']),
      b.cli(['card', 'set', '--tag', 'not a tag', '--json']),
      cli(['card', 'show', '--json', '--data-dir', emptyDir])
    ])
    expect(show.json).toEqual(set.json)
    expect(showText.stdout).toMatch(/^capabilities +cap:cli@1\.0\.0 \(served by the API\)$/m)
    expectFailure(noVersion, 2, 'INVALID_REQUEST', /exact version/)
    expectFailure(badTag, 2, 'INVALID_REQUEST', /tag/)
    expectFailure(noNode, 3, 'UNREACHABLE', /no running node found/)
    expect((await b.cli(['card', 'show', '--json'])).json).toEqual(set.json)
  })

  it('discover: finds the other node\'s agent; a query without capability or tag is refused', async () => {
    const found = await a.cli(['discover', '--capability', 'cap:cli', '--tag', 'cli', '--wait', '20000', '--timeout-ms', '8000', '--json'])
    expect(found.code, found.stderr).toBe(0)
    expect(found.json.cards.map((c: { agent_id: string }) => c.agent_id)).toEqual([bId])
    const [empty, bad] = await Promise.all([a.cli(['discover', '--json']), a.cli(['discover', '--capability', 'cap x', '--json'])])
    expectFailure(empty, 2, 'INVALID_REQUEST', /--capability and\/or --tag/)
    expectFailure(bad, 2, 'INVALID_REQUEST', /capability/)
  })

  let r1: Run
  let r2: Run
  let r3: Run

  it('delegate: prints the run handle at once; an agent without the capability is CAPABILITY_NOT_SUPPORTED', async () => {
    work = new Stream(await ApiClient.fromDataDir(b.dataDir), '/v1/work/stream')
    await work.ready()
    const [d1, d2, d3, unsupported, self] = await Promise.all([
      a.cli(['delegate', '--to', bId, '--capability', CAP, '--task', 'cli-1', '--input', '{"n":1}', '--json']),
      a.cli(['delegate', '--to', bId, '--capability', CAP, '--task', 'cli-2', '--json']),
      // no --to: the first agent discovered
      a.cli(['delegate', '--capability', CAP, '--task', 'cli-3', '--json']),
      a.cli(['delegate', '--to', bId, '--capability', 'cap:other@1.0.0', '--json']),
      a.cli(['delegate', '--to', aId, '--capability', CAP, '--json'])
    ])
    for (const d of [d1, d2, d3]) {
      expect(d.code, d.stderr).toBe(0)
      expect(d.json.run).toMatchObject({ agent_id: bId, delegator: aId, state: 'running', capability: { capability_id: 'cap:cli', version: '1.0.0' } })
    }
    r1 = d1.json.run
    r2 = d2.json.run
    r3 = d3.json.run
    expect([r1.correlation_id, r2.correlation_id, r3.correlation_id]).toEqual(['cli-1', 'cli-2', 'cli-3'])
    expectFailure(unsupported, 1, 'CAPABILITY_NOT_SUPPORTED', /does not declare cap:other@1\.0\.0/)
    expect(unsupported.json.error.status).toBe(422)
    expectFailure(self, 1, 'DELEGATION_REFUSED', /itself/)
    // the agent (this test, over HTTP) has the work and reports progress on the first run
    for (const r of [r1, r2, r3]) await work.next(e => e.event === 'work' && data(e).run.run_id === r.run_id)
    await (await ApiClient.fromDataDir(b.dataDir)).call('POST', `/v1/runs/${encodeURIComponent(r1.run_id)}/progress`, { payload: { step: 1 } })
  })

  it('runs list / runs show: both sides of a node\'s runs; a bad state and an unknown run are errors', async () => {
    const [listA, listB, show, showText, badState, unknown] = await Promise.all([
      a.cli(['runs', 'list', '--json']),
      b.cli(['runs', 'list', '--state', 'running', '--json']),
      a.cli(['runs', 'show', r1.run_id, '--json']),
      a.cli(['runs', 'show', r1.run_id]),
      a.cli(['runs', 'list', '--state', 'sleeping', '--json']),
      a.cli(['runs', 'show', `${bId}:0000`, '--json'])
    ])
    expect(listA.json.executing).toEqual([])
    expect(listA.json.delegated.map((r: Run) => r.run_id).sort()).toEqual([r1.run_id, r2.run_id, r3.run_id].sort())
    expect(listB.json.executing.map((r: Run) => r.run_id).sort()).toEqual([r1.run_id, r2.run_id, r3.run_id].sort())
    expect(show.json.run).toMatchObject({ run_id: r1.run_id, state: 'running', last_seq: 2 })
    expect(showText.stdout).toMatch(new RegExp(`^run +${r1.run_id}$`, 'm'))
    expect(showText.stdout).toMatch(/^state +running$/m)
    expectFailure(badState, 2, 'INVALID_REQUEST', /--state must be one of running, blocked, completed, failed/)
    expectFailure(unknown, 1, 'RUN_NOT_FOUND', /no run/)
    expect(unknown.json.error.status).toBe(404)
  })

  it('block / resume: the delegator pauses its run on a checkpoint and resolves it; wrong transitions and bad JSON are errors', async () => {
    const blocked = await a.cli(['block', r1.run_id, '--checkpoint', 'cp-cli', '--reason', 'hold on', '--json'])
    expect(blocked.code, blocked.stderr).toBe(0)
    expect(blocked.json.run).toMatchObject({ state: 'blocked', checkpoint_id: 'cp-cli', block_reason: 'hold on' })
    const [again, badJson] = await Promise.all([
      a.cli(['block', r1.run_id, '--checkpoint', 'cp-2', '--json']),
      a.cli(['resume', r1.run_id, '--resolution', '[1]', '--json'])
    ])
    expectFailure(again, 1, 'INVALID_TRANSITION', /only a running run can block/)
    expectFailure(badJson, 2, 'INVALID_REQUEST', /--resolution must be a JSON object/)

    const resumed = await a.cli(['resume', r1.run_id, '--resolution', '{"go":true}', '--json'])
    expect(resumed.code, resumed.stderr).toBe(0)
    expect(resumed.json.run.state).toBe('running')
    const item = data(await work.next(e => e.event === 'resume' && data(e).run_id === r1.run_id))
    expect(item).toMatchObject({ checkpoint_id: 'cp-cli', resolution: { go: true } })
    expectFailure(await a.cli(['resume', r1.run_id, '--resolution', '{}', '--json']), 1, 'INVALID_TRANSITION', /only a blocked run can resume/)
    // the agent finishes it
    await (await ApiClient.fromDataDir(b.dataDir)).call('POST', `/v1/runs/${encodeURIComponent(r1.run_id)}/complete`, { output: { ok: true } })
  })

  it('cancel: the delegator ends its run as CANCELED; canceling it again is INVALID_TRANSITION', async () => {
    const canceled = await a.cli(['cancel', r2.run_id, '--reason', 'not needed', '--json'])
    expect(canceled.code, canceled.stderr).toBe(0)
    expect(canceled.json.run).toMatchObject({ state: 'failed', failure: { code: 'CANCELED', message: 'not needed' } })
    await work.next(e => e.event === 'ended' && data(e).run_id === r2.run_id)
    expectFailure(await a.cli(['cancel', r2.run_id, '--json']), 1, 'INVALID_TRANSITION', /terminal/)
  })

  it('handoff: the delegator moves a run to another agent (same correlation); a finished run cannot move', async () => {
    workA = new Stream(await ApiClient.fromDataDir(a.dataDir), '/v1/work/stream')
    await workA.ready()
    const moved = await a.cli(['handoff', r3.run_id, '--to', aId, '--context', '{"why":"closer"}', '--json'])
    expect(moved.code, moved.stderr).toBe(0)
    expect(moved.json.run).toMatchObject({ agent_id: aId, correlation_id: 'cli-3', handoff_from: { run_id: r3.run_id, agent_id: bId } })
    const item = data(await workA.next(e => e.event === 'work' && data(e).run.run_id === moved.json.run.run_id))
    expect(item.handoff).toEqual({ from: { run_id: r3.run_id, agent_id: bId }, context: { why: 'closer' } })
    await work.next(e => e.event === 'ended' && data(e).run_id === r3.run_id)
    await (await ApiClient.fromDataDir(a.dataDir)).call('POST', `/v1/runs/${encodeURIComponent(item.run.run_id as string)}/complete`, { output: { moved: true } })
    expectFailure(await a.cli(['handoff', r2.run_id, '--to', aId, '--json']), 1, 'INVALID_TRANSITION', /terminal/)
  })

  it('events: what a correlation holds, or followed live until an event type; a bad correlation id is refused', async () => {
    const [held, bad] = await Promise.all([
      a.cli(['events', 'cli-1', '--json']),
      a.cli(['events', 'not a correlation', '--json'])
    ])
    expect(held.code, held.stderr).toBe(0)
    expect(held.json.events.map((e: { type: string }) => e.type)).toEqual(['run.started', 'run.progress', 'run.blocked', 'run.progress', 'run.completed'])
    expectFailure(bad, 1, 'INVALID_REQUEST', /correlation_id/)
    expect(bad.json.error.status).toBe(400)

    // --follow prints one JSON line per event: history first, then live ones, until --until
    const follow = new Proc(process.execPath, [MAIN, 'events', '--follow', 'cli-4', '--until', 'run.completed', '--json', '--data-dir', a.dataDir])
    procs.push(follow)
    const d = await a.cli(['delegate', '--to', bId, '--capability', CAP, '--task', 'cli-4', '--json'])
    const runId = d.json.run.run_id as string
    await follow.line(l => l.type === 'run.started')
    await work.next(e => e.event === 'work' && data(e).run.run_id === runId)
    await (await ApiClient.fromDataDir(b.dataDir)).call('POST', `/v1/runs/${encodeURIComponent(runId)}/complete`, { output: { live: true } })
    expect((await follow.exited).code, follow.stderr).toBe(0)
    expect(follow.lines.map(l => [l.type, l.seq, l.run_id])).toEqual([['run.started', 1, runId], ['run.completed', 2, runId]])
  })

  it('replay: the lifecycle of a correlation as JSON; a bad --timeout-ms is refused', async () => {
    const [replay, text, bad] = await Promise.all([
      a.cli(['replay', 'cli-3', '--json']),
      a.cli(['replay', 'cli-3']),
      a.cli(['replay', 'cli-3', '--timeout-ms', 'soon', '--json'])
    ])
    expect(replay.code, replay.stderr).toBe(0)
    expect(replay.json.transitions.map((t: { kind: string }) => t.kind)).toEqual(['delegate', 'handoff', 'complete'])
    expect(replay.json.runs.map((r: { executor: string }) => r.executor)).toEqual([bId, aId])
    expect(text.stdout).toMatch(/^correlation cli-3: 2 run\(s\), 4 event\(s\)$/m)
    expect(bad.code).toBe(2)
    expect(bad.stderr).toMatch(/--timeout-ms.*a whole number of milliseconds/s)
  })

  it('--api-url and --token (or AAP_MESH_API_URL / AAP_MESH_TOKEN) replace the data directory; a wrong token is UNAUTHORIZED', async () => {
    const { url, token } = await readApiFiles(a.dataDir)
    const [direct, env, wrong, down] = await Promise.all([
      cli(['runs', 'list', '--api-url', url, '--token', token, '--data-dir', emptyDir, '--json']),
      // (a --data-dir given on the command line would win over the environment: cli-api-source.test.ts)
      cli(['runs', 'list', '--json'], { AAP_MESH_API_URL: url, AAP_MESH_TOKEN: token }),
      cli(['runs', 'list', '--api-url', url, '--token', 'nope', '--json']),
      cli(['runs', 'list', '--api-url', 'http://127.0.0.1:9', '--token', 'x', '--json'])
    ])
    expect(direct.code, direct.stderr).toBe(0)
    expect(direct.json.delegated.length).toBe(4)
    expect(env.json).toEqual(direct.json)
    expectFailure(wrong, 1, 'UNAUTHORIZED', /wrong API token/)
    expect(wrong.json.error.status).toBe(401)
    expectFailure(down, 3, 'UNREACHABLE', /cannot reach the node's API at http:\/\/127\.0\.0\.1:9/)
  })
})
