/**
 * The sidecar, end to end, with nothing in-process: two `aap-mesh start`
 * processes on TCP loopback (the second bootstrapping off the first), a
 * Python agent beside each (examples/python-agent.py, HTTP only), and every
 * step driven through the CLI or the HTTP API: discover, delegate, block
 * (the agent, over HTTP), resume (CLI), handoff (the agent, over HTTP, as the
 * resolution asks), complete (the receiving agent, over HTTP), then
 * `aap-mesh replay` prints the whole lifecycle.
 */
import { stat } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { API_INFO_FILE, API_TOKEN_FILE } from '../src/api/files.ts'
import { MAIN, NodeProc, Proc, TempDirs } from './cli-helpers.ts'

const CAP = 'cap:summarize@1.0.0'

describe('sidecar end to end: node processes, Python agents over HTTP, the CLI', () => {
  const dirs = new TempDirs()
  const procs: Proc[] = []
  let dirA: string
  let dirB: string
  let a: NodeProc
  let b: NodeProc
  let aId: string
  let bId: string
  let metricsUrl: string

  function track<T extends Proc> (p: T): T {
    procs.push(p)
    return p
  }

  beforeAll(async () => {
    dirA = await dirs.make()
    dirB = await dirs.make()
    a = track(new NodeProc(dirA, ['--metrics-port', '0']))
    const sa = await a.started()
    aId = sa.agentId
    metricsUrl = sa.metrics ?? ''
    b = track(new NodeProc(dirB, ['--bootstrap', sa.addresses[0]!]))
    bId = (await b.started()).agentId
  })

  afterAll(async () => {
    await Promise.all(procs.map(async p => p.stop('SIGKILL')))
    await dirs.cleanup()
  })

  it('discover, delegate, block, resume, handoff and complete run through the CLI and HTTP, and replay prints the lifecycle', async () => {
    // the agents: one beside each node, registering the same capability over HTTP
    const pyB = track(new Proc('python3', ['examples/python-agent.py', '--data-dir', dirB, '--name', 'summarizer']))
    const pyA = track(new Proc('python3', ['examples/python-agent.py', '--data-dir', dirA, '--name', 'finisher']))
    expect((await pyB.event('registered')).agent_id).toBe(bId)
    expect((await pyA.event('registered')).serving).toEqual([CAP])
    await Promise.all([pyB.event('ready'), pyA.event('ready')])

    // discover (node 1 finds node 2's agent)
    const found = await a.cli(['discover', '--capability', CAP, '--wait', '20000', '--json'])
    expect(found.code, found.stderr).toBe(0)
    const cards = found.json.cards as Array<{ agent_id: string, name: string }>
    expect(cards.map(c => c.agent_id)).toContain(bId)
    expect(cards.find(c => c.agent_id === bId)?.name).toBe('summarizer')

    // delegate
    const input = { text: 'The mesh has no broker. Every node is equal.' }
    const d = await a.cli(['delegate', '--to', bId, '--capability', CAP, '--task', 'task-e2e', '--input', JSON.stringify(input), '--json'])
    expect(d.code, d.stderr).toBe(0)
    const run = d.json.run as { run_id: string, agent_id: string, correlation_id: string, state: string, delegator: string }
    expect(run).toMatchObject({ agent_id: bId, correlation_id: 'task-e2e', state: 'running', delegator: aId })

    // follow the correlation until the agent blocks on its checkpoint (over HTTP)
    const follow = track(new Proc(process.execPath, [MAIN, 'events', '--follow', 'task-e2e', '--until', 'run.blocked', '--json', '--data-dir', dirA]))
    expect((await follow.exited).code, follow.stderr).toBe(0)
    expect(follow.lines.map(l => l.type)).toEqual(['run.started', 'run.progress', 'run.blocked'])
    const blocked = await pyB.event('blocked', l => l.run_id === run.run_id)
    const shown = await a.cli(['runs', 'show', run.run_id, '--json'])
    expect(shown.json.run).toMatchObject({ state: 'blocked', checkpoint_id: blocked.checkpoint_id })

    // resume from the CLI; the resolution asks the agent to hand the run to node 1's agent
    const resolution = { handoff_to: aId, notes: 'node 1 sends it' }
    const resumed = await a.cli(['resume', run.run_id, '--resolution', JSON.stringify(resolution), '--json'])
    expect(resumed.code, resumed.stderr).toBe(0)
    expect(resumed.json.run.state).toBe('running')
    const got = await pyB.event('resumed', l => l.run_id === run.run_id)
    expect(got.resolution).toEqual(resolution)
    const handed = await pyB.event('handed_off', l => l.run_id === run.run_id)
    expect(handed.to_agent).toBe(aId)
    const done = await pyA.event('completed', l => l.run_id === handed.new_run_id)
    expect(done.output).toMatchObject({ continued_from: run.run_id, context: { notes: 'node 1 sends it' } })

    // the old run is read-only history that names its successor
    const old = await a.cli(['runs', 'show', run.run_id, '--json'])
    expect(old.json.run).toMatchObject({ state: 'completed', handoff_to: { run_id: handed.new_run_id, agent_id: aId } })

    // replay: the whole lifecycle, in order, as text and as JSON
    const text = await a.cli(['replay', 'task-e2e'])
    expect(text.code, text.stderr).toBe(0)
    const kinds = text.stdout.split('\n').map(l => /^\S+ {2}(delegate|progress|block|resume|handoff|complete|fail) /.exec(l)?.[1]).filter(k => k !== undefined)
    expect(kinds).toEqual(['delegate', 'progress', 'block', 'resume', 'handoff', 'progress', 'complete'])
    expect(text.stdout).toContain(`checkpoint ${String(blocked.checkpoint_id)} resolved with ${JSON.stringify(resolution)}`)
    expect(text.stdout).toMatch(/^correlation task-e2e: 2 run\(s\), 8 event\(s\)$/m)

    const replay = (await a.cli(['replay', 'task-e2e', '--json'])).json
    expect(replay.runs.map((r: { run_id: string, executor: string, state: string, started_by: string }) => [r.run_id, r.executor, r.state, r.started_by]))
      .toEqual([[run.run_id, bId, 'completed', 'delegate'], [handed.new_run_id, aId, 'completed', 'handoff']])
    expect(replay.checkpoints).toEqual([expect.objectContaining({ run_id: run.run_id, checkpoint_id: blocked.checkpoint_id, resolution, resolved_by: aId, attested: true })])
    expect(new Set(replay.events.map((e: { correlation_id: string }) => e.correlation_id))).toEqual(new Set(['task-e2e']))
  })

  it('the TypeScript example joins node 1 as its own in-process node and serves a run delegated from the CLI', async () => {
    const ts = track(new Proc(process.execPath, ['examples/ts-agent.ts', '--data-dir', dirA]))
    const ready = await ts.event('ready')
    const tsId = ready.agent_id as string
    const d = await a.cli(['delegate', '--to', tsId, '--capability', 'cap:translate@1.0.0', '--task', 'task-ts', '--input', '{"text":"one two three"}', '--json'])
    expect(d.code, d.stderr).toBe(0)
    const runId = d.json.run.run_id as string
    const blocked = await ts.event('run.blocked', l => l.run_id === runId)
    expect((blocked.payload as { checkpoint_id: string }).checkpoint_id).toMatch(/^review-/)
    expect((await a.cli(['resume', runId, '--resolution', '{"approved":true}', '--json'])).code).toBe(0)
    await ts.event('run.completed', l => l.run_id === runId)
    const shown = await a.cli(['runs', 'show', runId, '--json'])
    expect(shown.json.run).toMatchObject({ state: 'completed', output: { translation: 'three two one', reviewed: { approved: true } } })

    // a conversation: `send` waits for each turn's output; --continue makes the next turn, which remembers
    let previous: string | undefined
    for (const [i, text] of ['hello', 'again', 'bye'].entries()) {
      const args = previous === undefined ? ['--to', tsId, '--capability', 'cap:chat@1.0.0', '--task', 'task-chat'] : ['--continue', previous]
      const sent = await a.cli(['send', ...args, '--input', JSON.stringify({ text }), '--json'])
      expect(sent.code, sent.stderr).toBe(0)
      expect(sent.json.run).toMatchObject({ state: 'completed', correlation_id: 'task-chat', output: { turn: i + 1, heard_before: ['hello', 'again', 'bye'].slice(0, i) } })
      previous = sent.json.run.run_id as string
    }
    const chatText = await a.cli(['send', '--continue', previous!, '--input', '{"text":"once more"}'])
    expect(chatText.stdout).toContain('turn 4: you said \\"once more\\"')
    const turns = (await a.cli(['replay', 'task-chat', '--json'])).json
    expect(turns.contexts[0].turns.length).toBe(4)
    expect(await ts.stop('SIGTERM')).toEqual({ code: 0, signal: null })
    expect(ts.lines.at(-1)).toEqual({ event: 'stopped' })
  })

  it('serves Prometheus metrics: libp2p\'s, runs by state, delegations, run events, errors by code and discovery counters', async () => {
    // one error for the error counter
    expect((await a.cli(['runs', 'show', 'no-such-run', '--json'])).json.error.code).toBe('RUN_NOT_FOUND')
    const res = await fetch(metricsUrl)
    expect(res.status).toBe(200)
    const text = await res.text()
    expect(text).toMatch(/^libp2p_\w+/m)
    expect(text).toMatch(/^aap_runs\{state="completed",side="delegated"\} [1-9]/m)
    expect(text).toMatch(/^aap_runs\{state="completed",side="executing"\} [1-9]/m)
    expect(text).toMatch(/^aap_delegations_total\{outcome="ok"\} [1-9]/m)
    expect(text).toMatch(/^aap_run_events_total\{type="run.completed"\} [1-9]/m)
    expect(text).toMatch(/^aap_errors_total\{code="RUN_NOT_FOUND",source="api"\} [1-9]/m)
    expect(text).toMatch(/^aap_api_sse_clients\{stream="work"\} 1$/m)
    // liveness probes the executors of live delegated runs; the budget reports its bound and the open connections
    expect(text).toMatch(/^aap_liveness\{what="declared"\} 0$/m)
    expect(text).toMatch(/^aap_liveness\{what="superseded"\} 0$/m)
    expect(text).toMatch(/^aap_liveness\{what="notices_open"\} 0$/m)
    expect(text).toMatch(/^aap_connections\{what="max"\} 64$/m)
    expect(text).toMatch(/^aap_run_slots\{what="refused_delegator"\} 0$/m)
    expect(text).toMatch(/^aap_handoff_confirmations\{what="failed"\} 0$/m)
    expect(text).toMatch(/^aap_run_slots\{what="idempotency_sweep_failures"\} 0$/m)
    expect(text).toMatch(/^aap_connections\{what="open"\} [1-9]/m)
    // the node-wide bound on unread answers, and no caller cut off
    expect(text).toMatch(/^aap_held_answers\{what="max_bytes"\} 67108864$/m)
    expect(text).toMatch(/^aap_held_answers\{what="shed"\} 0$/m)
    // strangers' addresses refused, and relay reservations dropped or refused: counted
    expect(text).toMatch(/^aap_peer_addresses\{what="refused"\} \d+$/m)
    expect(text).toMatch(/^aap_relay_guard\{what="refused_per_network"\} 0$/m)
    // the peer-store bound (src/wire/peer-store-bound.ts): its bound, and nothing pruned in a mesh this small
    expect(text).toMatch(/^aap_peer_store\{what="max"\} 4096$/m)
    expect(text).toMatch(/^aap_peer_store\{what="pruned"\} 0$/m)
    // the routing-table upkeep (src/wire/dht-upkeep.ts): no contact of this mesh left it
    expect(text).toMatch(/^aap_dht_upkeep\{what="removed"\} 0$/m)
    // the relay client's figures (a node of the local mesh runs none: all zero)
    expect(text).toMatch(/^aap_relay_client\{what="reservations_failed"\} 0$/m)
    expect(text).toMatch(/^aap_relay_client\{what="addrs_dropped"\} 0$/m)
    // tasks a task's lock was too far behind to queue: none on an idle node
    expect(text).toMatch(/^aap_events_lock\{what="gossip_shed"\} 0$/m)
    expect(text).toMatch(/^aap_events_lock\{what="subscribe_refused"\} 0$/m)
    // discovery: the card's provider keys were walked and their records sent; failed held-card pulls by kind
    expect(text).toMatch(/^aap_discovery\{what="providerWalks"\} [1-9]/m)
    expect(text).toMatch(/^aap_discovery\{what="providerRecordsSent"\} [1-9]/m)
    expect(text).toMatch(/^aap_discovery\{what="heldCardPullTimeouts"\} \d+$/m)
    // the artifact store: its bounds, and nothing evicted or removed here
    expect(text).toMatch(/^aap_artifacts\{what="max_bytes"\} 1073741824$/m)
    expect(text).toMatch(/^aap_artifacts\{what="max_artifacts"\} 100000$/m)
    expect(text).toMatch(/^aap_artifacts\{what="evicted"\} 0$/m)
    expect(text).toMatch(/^aap_liveness\{what="unread_declared"\} 0$/m)
  })

  it('SIGTERM stops a node cleanly: its agent\'s stream ends, the API files go, and a restart still has every run', async () => {
    await stat(join(dirA, API_INFO_FILE))
    expect(await a.stop('SIGTERM')).toEqual({ code: 0, signal: null })
    expect(a.lines.at(-1)).toEqual({ event: 'stopped' })
    await expect(stat(join(dirA, API_INFO_FILE))).rejects.toThrow(/ENOENT/)
    await expect(stat(join(dirA, API_TOKEN_FILE))).rejects.toThrow(/ENOENT/)
    // the Python agent beside it saw its stream end
    const pyA = procs.find(p => p.proc.spawnargs.includes(dirA) && p.proc.spawnargs.includes('examples/python-agent.py'))!
    await pyA.event('disconnected')
    // a command now says there is no node
    const none = await a.cli(['runs', 'list', '--json'])
    expect(none.code).toBe(3)
    expect(none.json.error.code).toBe('UNREACHABLE')

    const again = track(new NodeProc(dirA, []))
    expect((await again.started()).agentId).toBe(aId)
    const list = await again.cli(['runs', 'list', '--state', 'completed', '--json'])
    expect(list.json.executing.map((r: { correlation_id: string }) => r.correlation_id)).toContain('task-e2e')
    expect([...new Set(list.json.delegated.map((r: { correlation_id: string }) => r.correlation_id))].sort()).toEqual(['task-chat', 'task-e2e', 'task-ts'])
  })
})
