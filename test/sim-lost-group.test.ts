/**
 * A group process that died while the simulation ran must not pass for a
 * healthy one: its figures are missing, so the report measured fewer nodes
 * than the run had (the row fails and is not "under the bound"), and a dead
 * hostile group attempted no forgery, so "0 forgeries accepted" tested
 * nothing (the report fails). The groups here are real child processes that
 * have exited.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { describe, expect, it } from 'vitest'
import { groupFigures, remoteHostiles, type Group } from '../src/sim/group.ts'
import type { SimReport } from '../src/sim/report.ts'
import type { ProcessFigures } from '../src/sim/resources.ts'
import { invariantProblems, measuredProblems, scaleRow } from '../src/sim/scaling.ts'

/** A group whose process has exited (as one that crashed). */
async function exitedGroup (hostile: boolean, first: number, count: number): Promise<Group> {
  const child = spawn(process.execPath, ['-e', 'process.exit(1)'], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
  await once(child, 'exit')
  return { hostile, first, count, child, members: [], incidents: {}, pending: new Map(), nextId: 1 }
}

function figures (role: ProcessFigures['role'], nodes: number): ProcessFigures {
  return {
    role,
    nodes,
    rss_bytes: nodes * 2 ** 20,
    rss_start_bytes: 0,
    rss_peak_bytes: nodes * 2 ** 20,
    heap_used_bytes: 0,
    heap_total_bytes: 0,
    external_bytes: 0,
    cpu_user_ms: 1,
    cpu_system_ms: 1,
    event_loop_delay_ms: { p50: 1, p99: 1, max: 1 },
    signatures: { checked: 1, hits: 0, refused: 0 },
    connections_peak: Array.from({ length: nodes }, () => 3),
    connections_end: Array.from({ length: nodes }, () => 2)
  }
}

/** A report of `nodes` nodes whose processes measured `measured` (the driver's and one group's), every invariant kept. */
function report (nodes: number, processes: ProcessFigures[], over: Partial<SimReport> = {}, hostileNodes = 0): SimReport {
  const measured = processes.reduce((a, p) => a + p.nodes, 0)
  return {
    title: 't',
    command: 'c',
    started_at: 'now',
    duration_ms: 1000,
    machine: { cpus: 2, cpu_model: 'm', node: 'v24', platform: 'linux-x64' },
    config: { nodes, processes: false, hostile_nodes: hostileNodes },
    invariants: { tasks: 2, tasks_completed: 2, traces_satisfying_contracts: 2, runs_acknowledged: 4, runs_lost: 0, forged_attempted: hostileNodes > 0 ? 5 : 0, forged_accepted: 0, events_expected: 8, events_delivered: 8, events_lost: 0 },
    latency: [],
    resources: { nodes, rss_bytes: 0, rss_per_node_bytes: 0, rss_peak_bytes: 0, heap_used_bytes: 0, cpu_user_ms: 0, cpu_system_ms: 0, cpu_cores_busy: 0, event_loop_delay_ms: { p50: 0, p99: 0, max: 0 } },
    processes,
    connections: { bound: 64, nodes: measured, peak_max: 3, peak_p50: 3, end_max: 2, end_p50: 2, nodes_over_bound: 0 },
    phases_ms: { start: 1, announce: 1, tasks: 1 },
    churn: { stops: 0, restarts: 0 },
    incidents: {},
    failures: [],
    ...over
  }
}

describe('a group process lost during the simulation', () => {
  it('gives no figures and is marked lost', async () => {
    const g = await exitedGroup(false, 10, 90)
    expect(await groupFigures([g])).toEqual([])
    expect(g.incidents).toEqual({ lost: 1 })
  })

  it('fails the scaling row when the processes measured fewer nodes than the run had', () => {
    // 100 nodes, of which the driver's 10 were measured: the group of 90 died
    const r = report(100, [figures('driver', 10)], { incidents: { group_lost: 1 } })
    const row = scaleRow(r)
    expect(row.passed).toBe(false)
    expect(row.connections?.under_bound).toBe(false)
    expect(row.why).toContain('only 10 of 100 nodes measured (1 group process lost)')
    expect(measuredProblems(r)).toEqual(['only 10 of 100 nodes measured (1 group process lost)'])
    // every node measured: the same report passes
    const whole = scaleRow(report(100, [figures('driver', 10), figures('group', 90)]))
    expect(whole.why).toEqual([])
    expect(whole.passed).toBe(true)
    expect(whole.connections?.under_bound).toBe(true)
  })

  it('leaves a run with worker processes (--processes, never measured) alone', () => {
    const r = report(20, [figures('driver', 7)])
    expect(measuredProblems({ ...r, config: { ...r.config, processes: true } })).toEqual([])
  })

  it('makes a dead hostile group count as lost, and a report with hostile nodes that attempted nothing fail', async () => {
    const g = await exitedGroup(true, 90, 10)
    const noted = (_kind: string) => (_err: unknown): 0 => 0
    const hostiles = await remoteHostiles(g, [], noted)
    expect(await hostiles.attempted()).toBe(0)
    expect(g.incidents).toEqual({ hostile_lost: 1 })
    const r = report(100, [figures('driver', 90), figures('hostile', 10)], {}, 10)
    expect(invariantProblems(r)).toEqual([])
    const vacuous = { ...r, invariants: { ...r.invariants, forged_attempted: 0 } }
    expect(invariantProblems(vacuous)).toEqual(['10 hostile nodes attempted no forgery: nothing was tested'])
    expect(scaleRow(vacuous).passed).toBe(false)
    // without hostile nodes, no forgery attempted is what is expected
    expect(invariantProblems(report(100, [figures('driver', 100)]))).toEqual([])
  })
})
