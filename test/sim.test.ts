import { describe, expect, it } from 'vitest'
import { DEFAULT_SCENARIO, runScenario } from '../src/sim/scenario.ts'
import { checkTrace, transportLeaks } from '../src/sim/contracts.ts'
import { renderHtml, renderSummary } from '../src/sim/report.ts'
import { quietPhaseMaxMs } from './fixtures/sim-wait.ts'

/** A few seconds alone; beside other work its discovers at rest (6 of each kind) may wait much longer. */
const SIM_CASE_MS = quietPhaseMaxMs(6) + 60_000

describe('a small simulation keeps every invariant of the report', () => {
  it('8 nodes, one hostile, a few tasks: all contracts hold, nothing lost, no forgery accepted', async () => {
    const report = await runScenario({ ...DEFAULT_SCENARIO, nodes: 8, tasks: 4, concurrency: 2, observers: 2, hostileShare: 0.125, seed: 7, quietDiscovers: 6, command: 'test' })
    const inv = report.invariants
    expect(report.failures).toEqual([])
    expect(inv.tasks_completed).toBe(4)
    expect(inv.traces_satisfying_contracts).toBe(4)
    expect(inv.runs_acknowledged).toBe(8)
    expect(inv.runs_lost).toBe(0)
    expect(inv.forged_attempted).toBeGreaterThan(0)
    expect(inv.forged_accepted).toBe(0)
    expect(inv.events_expected).toBeGreaterThan(0)
    expect(inv.events_lost).toBe(0)
    // what the task drivers' discovers did in the tasks phase: one lookup or more per task, each card fetched or counted as not had
    const d = report.discovery ?? {}
    expect(d.lookups).toBeGreaterThanOrEqual(4)
    expect(d.lookupProviders).toBeGreaterThan(0)
    // cards come from the agents, or from the peers that named them (held-cards.ts)
    expect((d.fetchedCards ?? 0) + (d.heldCardsReceived ?? 0)).toBeGreaterThan(0)
    expect(d.discoversCutShort).toBe(0)
    expect(renderSummary(report)).toMatch(/discovery \(task drivers\): \d+ lookups/)
    const html = renderHtml(report)
    expect(html).toContain('<svg')
    expect(html).not.toMatch(/<script|(src|href)="https?:/)
    expect(renderSummary(report)).toContain('runs lost                  0')
    // resources and phases are reported, whatever their values
    expect(report.phases_ms.start).toBeGreaterThan(0)
    expect(report.phases_ms.tasks).toBeGreaterThan(0)
    expect(report.resources.rss_peak_bytes).toBeGreaterThanOrEqual(report.resources.rss_bytes * 0.5)
    expect(Number.isFinite(report.resources.event_loop_delay_ms.p99)).toBe(true)
  }, SIM_CASE_MS)

  it('with churn, nodes stop and restart during the run and no acknowledged run is lost', async () => {
    const report = await runScenario({ ...DEFAULT_SCENARIO, nodes: 10, tasks: 6, concurrency: 2, observers: 1, hostileShare: 0, churn: true, seed: 3, quietDiscovers: 6, command: 'test --churn' })
    expect(report.churn.stops).toBeGreaterThan(0)
    expect(report.churn.restarts).toBe(report.churn.stops)
    expect(report.invariants.runs_lost).toBe(0)
    expect(report.invariants.forged_accepted).toBe(0)
    expect(report.failures).toEqual([])
    expect(report.invariants.traces_satisfying_contracts).toBe(6)
  }, SIM_CASE_MS)
})

describe('the four contracts, checked on a trace', () => {
  const base = { executor: 'x', signature: 's', at: '2026-01-01T00:00:00.000Z', prev: null }
  const cap = { capability_id: 'cap:a', version: '1.0.0' }
  const good = [
    { ...base, run_id: 'x:1', correlation_id: 't', seq: 1, type: 'run.started' as const, payload: { capability: cap } },
    { ...base, run_id: 'x:1', correlation_id: 't', seq: 2, type: 'run.blocked' as const, payload: { checkpoint_id: 'cp', reason: 'r', by: 'coordinator' } },
    { ...base, run_id: 'x:1', correlation_id: 't', seq: 3, type: 'run.progress' as const, payload: { transition: 'resume', checkpoint_id: 'cp', resolution: { ok: 1 }, by: 'coordinator' } },
    { ...base, run_id: 'x:1', correlation_id: 't', seq: 4, type: 'run.completed' as const, payload: { transition: 'handoff', handoff_to: { run_id: 'y:1', agent_id: 'y' } } },
    { ...base, executor: 'y', run_id: 'y:1', correlation_id: 't', seq: 1, type: 'run.started' as const, payload: { capability: cap, handoff_from: { run_id: 'x:1', agent_id: 'x' } } },
    { ...base, executor: 'y', run_id: 'y:1', correlation_id: 't', seq: 2, type: 'run.completed' as const, payload: { output: {} } }
  ]

  it('accepts a trace that keeps all four', () => {
    expect(checkTrace('t', good, { resolutions: { cp: { ok: 1 } }, transfers: 1 }).ok).toBe(true)
  })

  it('flags a transport in a payload, a foreign correlation, an unresolved checkpoint and a broken handoff link', () => {
    const withEndpoint = good.map(e => e.seq === 1 && e.run_id === 'x:1' ? { ...e, payload: { capability: { ...cap, transport: 'stdio' } } } : e)
    expect(checkTrace('t', withEndpoint).capability_ref.ok).toBe(false)
    const leaked = good.map(e => e.seq === 2 && e.run_id === 'y:1' ? { ...e, correlation_id: 'other' } : e)
    expect(checkTrace('t', leaked).task_correlation.ok).toBe(false)
    const wrongResolution = checkTrace('t', good, { resolutions: { cp: { ok: 2 } } })
    expect(wrongResolution.checkpoint_block.ok).toBe(false)
    const noLink = good.map(e => e.run_id === 'y:1' && e.seq === 1 ? { ...e, payload: { capability: cap } } : e)
    expect(checkTrace('t', noLink).ownership_handoff.ok).toBe(false)
  })

  it('flags an endpoint or a multiaddr anywhere in an event an L2 caller gets', () => {
    for (const leak of ['/p2p/12D3KooWabc', '/ip4/10.0.0.1/tcp/4001', '/dns4/example.org/tcp/443/wss/p2p/12D3KooWabc']) {
      const leaked = good.map(e => e.seq === 2 && e.run_id === 'y:1' ? { ...e, payload: { ...e.payload, note: { where: leak } } } : e)
      expect(checkTrace('t', leaked).capability_ref.ok, leak).toBe(false)
    }
  })

  it('contract 3 with a coordinator: each checkpoint reaches the run as a block the coordinator raised', () => {
    expect(checkTrace('t', good, { resolutions: { cp: { ok: 1 } }, transfers: 1, raisedBy: 'coordinator' }).ok).toBe(true)
    const byAgent = good.map(e => e.type === 'run.blocked' ? { ...e, payload: { ...e.payload, by: 'x' } } : e)
    const verdict = checkTrace('t', byAgent, { raisedBy: 'coordinator' })
    expect(verdict.checkpoint_block.ok).toBe(false)
    expect(verdict.checkpoint_block.problems).toEqual(['x:1#2: block raised by x, not the coordinator'])
  })

  it('flags a /p2p/ reference or a multiaddr in a payload', () => {
    const peer = '12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN'
    for (const leak of [`/p2p/${peer}`, '/ip4/127.0.0.1/tcp/4001', '/memory/x/p2p/y']) {
      const trace = good.map(e => e.seq === 2 && e.run_id === 'y:1' ? { ...e, payload: { output: { next: [{ at: leak }] } } } : e)
      expect(checkTrace('t', trace).capability_ref.ok, leak).toBe(false)
    }
  })
})

describe('transportLeaks: the transport rule on anything the API hands up', () => {
  const peer = '12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN'
  const card = { agent_id: peer, name: 'n', capabilities: [{ capability_id: 'cap:a/b', version: '1.0.0' }], tags: ['x'], signature: 's' }

  it('finds nothing in a card view, a run or ids with slashes', () => {
    expect(transportLeaks({ cards: [card] })).toEqual([])
    expect(transportLeaks({ run: { run_id: `${peer}:00ff`, correlation_id: 'team/tcp-task', delegator: peer, authorized: [peer] } })).toEqual([])
  })

  it('catches an endpoint, addresses, a /p2p/ reference or a multiaddr anywhere, naming where', () => {
    expect(transportLeaks({ cards: [{ ...card, endpoint: `/p2p/${peer}` }] })).toEqual([
      '$.cards[0].endpoint: a transport field',
      `$.cards[0].endpoint: names a transport address (/p2p/${peer})`
    ])
    expect(transportLeaks({ addresses: [] }, 'node')).toEqual(['node.addresses: a transport field'])
    expect(transportLeaks({ a: { b: [1, { c: `/ip4/127.0.0.1/tcp/4001/p2p/${peer}` }] } })).toEqual([
      `$.a.b[1].c: names a transport address (/ip4/127.0.0.1/tcp/4001/p2p/${peer})`
    ])
    expect(transportLeaks({ [`/dns4/example.org/tcp/1`]: true })).toHaveLength(1)
    expect(transportLeaks(`see /p2p/${peer}`)).toHaveLength(1)
  })

  it('walks a deeply nested answer without overflowing the stack', () => {
    let deep: unknown = `/p2p/${peer}`
    for (let i = 0; i < 100_000; i++) deep = [deep]
    expect(transportLeaks(deep)).toHaveLength(1)
  })
})
