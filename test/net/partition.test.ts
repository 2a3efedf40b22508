/**
 * A partition that heals. Five public hosts in two groups:
 *
 *   left:  pub1 (everyone's bootstrap peer), left (a delegator)
 *   right: pub2, right (a Python agent's node), right2 (another delegator)
 *
 * Two runs are blocked at the agent on `right` before the cut: task-cross
 * (delegated from the left) and task-part (delegated from right2, followed by
 * a subscriber on the left). During the cut (nftables drop on every host, both
 * ways) calls across it fail with typed errors, runs on both sides keep their
 * state, and task-part is resumed and completed inside the right group. After
 * the heal the right group rejoins through its bootstrap loop, the left
 * subscriber gets the events published during the cut, task-cross resumes and
 * completes, replays on both sides agree, and discovery finds across again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Proc } from '../cli-helpers.ts'
import { Lab, type Host } from './lab.ts'
import { Dirs, killSpawned, procIn, startNode, type NetNode } from './nodes.ts'
import { until } from '../helpers.ts'

const CAP = 'cap:summarize@1.0.0'
/** Typed failures a call across a cut may end with (unreachable, or reached but no answer in time). */
const CUT_ERRORS = ['AGENT_NOT_FOUND', 'TIMEOUT']
/** Longer than the cut lasts in this test (the default, EXECUTOR_LOST_AFTER_MS, is 30 s). */
const LEFT_LOST_AFTER_MS = 180_000

describe('a partition between two groups of hosts, then the heal', () => {
  let lab: Lab
  const dirs = new Dirs()
  const procs: Proc[] = []
  const n: Record<string, NetNode> = {}
  const hosts: Record<string, Host> = {}
  let py: Proc

  beforeAll(async () => {
    lab = await Lab.create()
    for (const name of ['pub1', 'left', 'pub2', 'right', 'right2']) hosts[name] = await lab.publicHost(name)
    n.pub1 = await startNode(hosts.pub1!, dirs)
    procs.push(n.pub1)
    for (const name of ['left', 'pub2', 'right', 'right2']) {
      // the left delegator keeps its run across the cut blocked for the whole test: the calls that fail across
      // the cut (each dials twice, DIAL_ATTEMPTS_MAX) must not outlast its liveness bound (protocols/liveness.md)
      const card = name === 'left' ? ['--name', 'left', '--capability', 'cap:left@1.0.0', '--executor-lost-after', String(LEFT_LOST_AFTER_MS)] : []
      n[name] = await startNode(hosts[name]!, dirs, ['--bootstrap', n.pub1.tcpAddr, ...card])
      procs.push(n[name])
    }
    py = procIn(hosts.right!, ['python3', 'examples/python-agent.py', '--data-dir', n.right!.dataDir, '--name', 'summarizer'])
    procs.push(py)
    await py.event('ready')
  }, 90_000)

  afterAll(async () => {
    await Promise.all(procs.map(async p => p.stop('SIGKILL')))
    await killSpawned()
    await lab?.destroy()
    await dirs.cleanup()
  })

  it('keeps runs and events through the cut, fails calls across it with typed errors, and converges after the heal', async () => {
    const { left, right, right2 } = n as Record<string, NetNode>
    const t0 = Date.now()
    const step = (what: string): void => { console.info(`${Date.now() - t0} ms: ${what}`) }
    // before the cut: two runs blocked at the agent on the right
    const found = await left!.cli(['discover', '--capability', CAP, '--wait', '30000', '--json'])
    expect(found.json.cards.map((c: { agent_id: string }) => c.agent_id)).toContain(right!.agentId)
    const cross = await left!.cli(['delegate', '--to', right!.agentId, '--capability', CAP, '--task', 'task-cross', '--input', '{"text":"across"}', '--json'])
    expect(cross.code, cross.stderr).toBe(0)
    const crossRun = cross.json.run.run_id as string
    const part = await right2!.cli(['delegate', '--to', right!.agentId, '--capability', CAP, '--task', 'task-part', '--input', '{"text":"inside"}', '--json'])
    expect(part.code, part.stderr).toBe(0)
    const partRun = part.json.run.run_id as string
    await py.event('blocked', l => l.run_id === crossRun)
    await py.event('blocked', l => l.run_id === partRun)
    // a subscriber on the left follows task-part until it completes
    const follower = procIn(hosts.left!, [process.execPath, 'src/cli/main.ts', 'events', 'task-part', '--follow', '--until', 'run.completed', '--json',
      '--participant', right!.agentId, '--data-dir', left!.dataDir])
    procs.push(follower)
    await follower.line(l => l.type === 'run.blocked', 'task-part blocked, seen from the left')
    // the left delegator's own record of task-cross has taken the block before the cut: the executor's
    // run.blocked may reach it after the agent's own line (by gossip, else by the tail sync), and cannot during the cut
    const leftState = async (): Promise<string | undefined> =>
      ((await left!.cli(['runs', 'list', '--correlation', 'task-cross', '--json'])).json.delegated as Array<{ state: string }>)[0]?.state
    await until(async () => await leftState() === 'blocked', 'the left delegator\'s record of task-cross to show the block')

    step('the cut')
    // the cut
    const leftSide = [hosts.pub1!, hosts.left!]
    const rightSide = [hosts.pub2!, hosts.right!, hosts.right2!]
    const marks = Object.fromEntries(Object.entries(n).map(([k, v]) => [k, v.lines.length]))
    await lab.partition(leftSide, rightSide)
    // libp2p's connection monitor finds the dead connections and closes them
    await left!.disconnectedFrom(right!.peerId)
    await right!.disconnectedFrom(n.pub1!.peerId)

    step('calls across the cut fail, typed')
    // calls across the cut fail, typed
    const d = await left!.cli(['delegate', '--to', right!.agentId, '--capability', CAP, '--task', 'task-during', '--input', '{}', '--json'])
    expect(d.code).not.toBe(0)
    expect(CUT_ERRORS, d.stdout + d.stderr).toContain(d.json.error.code)
    const r = await left!.cli(['resume', crossRun, '--resolution', '{"approved":true}', '--json'])
    expect(r.code).not.toBe(0)
    expect(CUT_ERRORS, r.stdout + r.stderr).toContain(r.json.error.code)
    step('runs started before the cut are kept on ')
    // runs started before the cut are kept on both sides
    // (the delegators' own records, and the executor's: asking the executor across the cut fails, typed)
    const shown = await left!.cli(['runs', 'show', crossRun, '--json'])
    expect(CUT_ERRORS, shown.stdout + shown.stderr).toContain(shown.json.error.code)
    const delegatedLeft = (await left!.cli(['runs', 'list', '--correlation', 'task-cross', '--json'])).json.delegated as Array<{ run_id: string, state: string }>
    expect(delegatedLeft.map(x => [x.run_id, x.state])).toEqual([[crossRun, 'blocked']])
    const delegatedRight = (await right2!.cli(['runs', 'list', '--correlation', 'task-part', '--json'])).json.delegated as Array<{ run_id: string, state: string }>
    expect(delegatedRight.map(x => [x.run_id, x.state])).toEqual([[partRun, 'blocked']])
    const executing = (await right!.cli(['runs', 'list', '--json'])).json.executing as Array<{ run_id: string, state: string }>
    expect(executing.map(x => [x.run_id, x.state]).sort()).toEqual([[crossRun, 'blocked'], [partRun, 'blocked']].sort())
    step('inside the right group')
    // inside the right group the mesh goes on: task-part is resumed and completed during the cut
    const inside = await right2!.cli(['resume', partRun, '--resolution', '{"approved":true}', '--json'])
    expect(inside.code, inside.stderr).toBe(0)
    await py.event('completed', l => l.run_id === partRun)
    expect(follower.lines.some(l => l.type === 'run.completed')).toBe(false)

    step('the heal')
    // the heal: the right group rejoins (its bootstrap loop redials pub1 with backoff, unless
    // another part of libp2p reconnected first)
    const healMark = right!.lines.length
    await lab.heal([...leftSide, ...rightSide])
    await right!.line(l => l.event === 'connection' && l.peer === n.pub1!.peerId && right!.lines.indexOf(l) >= healMark, 'a connection to pub1 after the heal')
    expect(right!.lines.slice(marks.right!).some(l => l.event === 'joined') || right!.connectedTo(n.pub1!.peerId)).toBe(true)
    step('the events published during the cut reac')
    // the events published during the cut reach the subscriber on the left
    expect((await follower.exited).code, follower.stderr).toBe(0)
    const seen = follower.lines.map(l => l.type)
    // everything after the block was published during the cut (the resume's event, the completion)
    expect(seen.slice(seen.indexOf('run.blocked') + 1).length, seen.join(',')).toBeGreaterThanOrEqual(2)
    expect(seen.at(-1)).toBe('run.completed')

    step('the run that waited across the cut')
    // the run that waited across the cut goes on
    const resumed = await left!.cli(['resume', crossRun, '--resolution', '{"approved":true}', '--json'])
    expect(resumed.code, resumed.stderr).toBe(0)
    await py.event('completed', l => l.run_id === crossRun)

    step('replays agree')
    // replays agree on both sides
    for (const task of ['task-part', 'task-cross']) {
      const a = await left!.cli(['replay', task, '--participant', right!.agentId, '--json'])
      const b = await right2!.cli(['replay', task, '--participant', right!.agentId, '--json'])
      expect(a.code, a.stderr).toBe(0)
      expect(b.code, b.stderr).toBe(0)
      const ids = (x: typeof a): string[] => x.json.events.map((e: { event_id: string }) => e.event_id)
      expect(ids(a).length).toBeGreaterThan(0)
      expect(ids(a)).toEqual(ids(b))
      expect(a.json.runs.map((x: { state: string }) => x.state)).toEqual(['completed'])
    }

    step('discovery works across again')
    // discovery works across again, both ways
    const again = await left!.cli(['discover', '--capability', CAP, '--wait', '30000', '--json'])
    expect(again.json.cards.map((c: { agent_id: string }) => c.agent_id)).toContain(right!.agentId)
    const back = await right2!.cli(['discover', '--capability', 'cap:left@1.0.0', '--wait', '30000', '--json'])
    expect(back.json.cards.map((c: { agent_id: string }) => c.agent_id)).toEqual([left!.agentId])
  }, 150_000)
})
