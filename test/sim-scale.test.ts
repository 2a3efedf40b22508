/**
 * npm run sim:scale on two tiny sizes: each size runs with its agents in
 * group processes, and the report has every figure per size and the
 * invariants. The page logic (growth against log N, a size that failed) is
 * checked on rows made by hand.
 */
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { discoverGrowth, failedRow, renderScaling, workLine, type QuietWork, type ScaleRow, type ScalingDoc } from '../src/sim/scaling.ts'
import { outsideJoins } from '../src/sim/group.ts'
import { quietTable, roundTripLine } from '../src/sim/scaling-quiet.ts'
import type { SimReport } from '../src/sim/report.ts'
import { quietPhaseMaxMs } from './fixtures/sim-wait.ts'

/** Discovers at rest of each kind per size: fewer than a report's SIM_QUIET_DISCOVERS, each waits for the machine to settle. */
const QUIET = 12

/**
 * How long the two sizes may take: about 30 s alone, but on a machine that other work keeps busy each size's
 * discovers at rest wait much longer (2 min 40 s in all beside a CPU burner; the limit was 150 s, and the run was
 * killed).
 */
const RUN_MS = 2 * quietPhaseMaxMs(QUIET) + 120_000

const SCRIPT = new URL('../scripts/sim-scale.ts', import.meta.url).pathname
const dirs: string[] = []
afterAll(async () => { await Promise.all(dirs.map(async d => rm(d, { recursive: true, force: true }))) })

async function run (args: string[], timeoutMs: number): Promise<number | string> {
  const child = spawn(process.execPath, [SCRIPT, ...args], { stdio: ['ignore', 'ignore', 'pipe'] })
  let err = ''
  child.stderr.on('data', (b: Buffer) => { err = (err + b.toString()).slice(-4000) })
  const timer = setTimeout(() => { child.kill('SIGKILL') }, timeoutMs)
  const code = await new Promise<number | string>(resolve => { child.on('exit', (c, s) => { resolve(c ?? s ?? 'unknown') }) })
  clearTimeout(timer)
  if (code !== 0) process.stderr.write(err)
  return code
}

describe('npm run sim:scale', () => {
  it('runs two tiny sizes over group processes and reports every figure and the invariants', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'aap-scale-'))
    dirs.push(dir)
    const out = join(dir, 'scaling')
    const code = await run(['--sizes', '8,10', '--tasks', '2', '--quiet-discovers', String(QUIET), '--per-process', '2', '--observers', '1', '--concurrency', '2',
      '--out', out, '--heap-at', '10', '--heap-dir', join(dir, 'heap'), '--quiet'], RUN_MS)
    expect(code).toBe(0)
    const doc = JSON.parse(await readFile(`${out}.json`, 'utf8')) as ScalingDoc
    expect(doc.rows.map(r => r.nodes)).toEqual([8, 10])
    for (const r of doc.rows) {
      expect(r.passed, r.why.join('; ')).toBe(true)
      expect(r.invariants).toMatchObject({ tasks: 2, traces_satisfying_contracts: 2, runs_lost: 0, forged_accepted: 0 })
      // the agents past the driver process's nodes are in group processes of at most 2 nodes
      expect(r.processes).toBeGreaterThan(1)
      expect(r.nodes_per_process.reduce((a, b) => a + b, 0)).toBe(r.nodes)
      expect(Math.max(...r.nodes_per_process.slice(1))).toBeLessThanOrEqual(2)
      expect(r.connections?.nodes).toBe(r.nodes)
      expect(r.connections?.peak_max).toBeGreaterThan(0)
      expect(r.connections?.peak_max).toBeLessThanOrEqual(r.connections?.bound ?? 0)
      for (const k of ['rss_per_node_mib', 'rss_per_node_above_start_mib', 'group_rss_per_node_mib', 'heap_used_per_node_mib', 'after_gc_rss_per_node_mib', 'wall_s'] as const) {
        expect(r[k], k).toBeGreaterThan(0)
      }
      for (const k of ['discover', 'delegate', 'delivery'] as const) {
        expect(r[k]?.n, k).toBeGreaterThan(0)
        expect(r[k]?.p99, k).toBeGreaterThanOrEqual(r[k]?.p50 ?? Infinity)
      }
      expect(r.signatures?.checked).toBeGreaterThan(0)
      expect(r.discover_work?.lookups).toBeGreaterThan(0)
      // the discovers at rest after the tasks: each found cards, each counted as one lookup
      expect(r.quiet_discover?.n).toBe(QUIET)
      expect(r.quiet_discover_work).toMatchObject({ lookups: QUIET, empty: 0 })
      // the machine did the discovers' work: its CPU was busy during them, and is measured before them too
      expect(r.quiet_discover_work?.machine_busy).toBeGreaterThan(0)
      expect(r.quiet_discover_work?.machine_busy_idle).toBeGreaterThanOrEqual(0)
      expect(r.quiet_discover_work?.dials_per_lookup).toBeGreaterThanOrEqual(0)
      // the contacts asked by key and what their cards were worth are counted (session 70)
      expect(r.quiet_discover_work?.key_asks_per_lookup).toBeGreaterThan(0)
      expect(r.quiet_discover_work?.rejected_per_lookup).toBeGreaterThanOrEqual(0)
      const unbacked = r.quiet_discover_work?.unbacked_share
      expect(unbacked === undefined || (unbacked >= 0 && unbacked <= 1)).toBe(true)
      // each discover waited for the machine to settle after the one before (or is counted as not)
      expect(r.quiet_discover_work?.unsettled).toBeGreaterThanOrEqual(0)
      expect(r.quiet_discover_work?.settle_ms).toBeGreaterThan(0)
      expect(r.quiet_first_card?.n).toBe(QUIET)
      // a round trip to a connected peer before each of those discovers, each timed or counted as failed
      expect((r.quiet_round_trip?.n ?? 0) + (r.quiet_discover_work?.round_trip_failures ?? -1)).toBe(QUIET)
      expect(r.quiet_round_trip?.p50).toBeGreaterThan(0)
      expect(existsSync(join(out, `n${r.nodes}`, 'report.html'))).toBe(true)
    }
    // at 10 nodes the one hostile node runs in a hostile group process of its own, and forges
    const ten = JSON.parse(await readFile(join(out, 'n10', 'report.json'), 'utf8')) as SimReport
    expect(ten.processes?.map(p => p.role)).toEqual(['driver', 'group', 'group', 'hostile'])
    expect(ten.processes?.find(p => p.role === 'hostile')?.nodes).toBe(1)
    expect(ten.processes?.[0]?.nodes).toBe(6)
    expect(ten.invariants.forged_attempted).toBeGreaterThan(0)
    expect(doc.growth?.rows.map(g => g.nodes)).toEqual([10])
    expect(doc.quiet_growth?.rows.map(g => g.nodes)).toEqual([10])
    expect(doc.heap?.[0]?.top.length).toBeGreaterThan(0)
    expect(Array.isArray(doc.heap?.[0]?.held)).toBe(true)
    const md = await readFile(`${out}.md`, 'utf8')
    expect(md).toContain('Made by `npm run sim:scale -- --sizes 8,10')
    for (const h of ['## Verdict per size', '## Connections per node', '## Memory per node', '## Latency', '## Discover p50 against log N', '### At rest', '## Heap snapshot']) expect(md).toContain(h)
    expect(md).toMatch(/4\. Discover p50 grows no faster than log N: during the tasks .*; in the mesh at rest /)
    expect(md).toMatch(/\| 10 \| passes \| 2 \/ 2 \| 0 of 4 \|/)
    expect(md).toMatch(/One round trip at rest \(a ping to a connected peer before each discover\), p50: [0-9.]+ ms at 8 nodes.*, [0-9.]+ ms at 10 nodes/)
  }, RUN_MS + 30_000)

  it('has a group join through the driver and the other groups, not through itself', () => {
    const listening = [['/g0/a', '/g0/b'], ['/g1/a'], ['/g2/a', '/g2/b']]
    expect(outsideJoins(['/d/a'], listening, 1)).toEqual(['/d/a', '/g0/a', '/g0/b', '/g2/a', '/g2/b'])
    expect(outsideJoins([], listening, 0)).toEqual(['/g1/a', '/g2/a', '/g2/b'])
  })

  it('compares discover p50 growth with log N, and reports a size without a report as failing with why', () => {
    const row = (nodes: number, p50: number): ScaleRow => ({ nodes, passed: true, why: [], wall_s: 1, processes: 1, nodes_per_process: [nodes], discover: { p50, p99: p50, n: 10 } })
    const slow = discoverGrowth([row(50, 100), row(100, 110), row(200, 120)])
    expect(slow?.within).toBe(true)
    expect(slow?.rows[1]?.log_ratio).toBeCloseTo(Math.log(200) / Math.log(50))
    const fast = discoverGrowth([row(200, 300), row(50, 100)])
    expect(fast).toMatchObject({ base: 50, within: false })
    expect(discoverGrowth([row(50, 100)])).toBeUndefined()
    // the discovers at rest are compared on their own figures
    const quiet = (nodes: number, p50: number): ScaleRow => ({ ...row(nodes, 10 * p50), quiet_discover: { p50, p99: p50, n: 40 } })
    expect(discoverGrowth([quiet(50, 20), quiet(500, 30)], 'quiet_discover')).toMatchObject({ base: 50, within: true })
    expect(discoverGrowth([quiet(50, 20), quiet(500, 30)])).toMatchObject({ within: true })
    expect(discoverGrowth([quiet(50, 20), quiet(500, 60)], 'quiet_discover')?.within).toBe(false)
    expect(discoverGrowth([row(50, 100), row(100, 110)], 'quiet_discover')).toBeUndefined()
    const failed = failedRow(500, 60_000, 'did not finish within 40 min (stopped)')
    const md = renderScaling({ command: 'x', made_at: 'now', machine: 'm', per_process: 50, tasks: 40, rows: [row(50, 100), failed] })
    expect(md).toContain('| 500 | **fails**: did not finish within 40 min (stopped) |')
    expect(md).toContain('Not enough sizes')
  })

  it('says which of the nodes past the hard limit were hostile', () => {
    const row = (nodes: number, overHard: number, hostileOver: number): ScaleRow => ({
      nodes, passed: true, why: [], wall_s: 1, processes: 2, nodes_per_process: [nodes - 5, 5],
      connections: {
        bound: 64, nodes, peak_max: 64 + 64 + overHard, peak_p50: 60, end_max: 64, end_p50: 50, nodes_over_bound: 3,
        hard_limit: 128, nodes_over_bound_at_end: 0, nodes_over_hard_limit: overHard, hostile_over_hard_limit: hostileOver, under_bound: overHard === 0
      }
    })
    const hostileOnly = renderScaling({ command: 'x', made_at: 'now', machine: 'm', per_process: 50, tasks: 40, rows: [row(50, 0, 0), row(200, 2, 2)] })
    expect(hostileOnly).toContain('past the hard limit (2 of them hostile)')
    expect(hostileOnly).toContain('**no** (or not measured) at 200 nodes; every honest node was, at every size')
    const honestToo = renderScaling({ command: 'x', made_at: 'now', machine: 'm', per_process: 50, tasks: 40, rows: [row(200, 3, 2)] })
    expect(honestToo).toContain('**no** (or not measured) at 200 nodes.')
  })

  it('puts the whole discover at rest in round trips at rest, size by size', () => {
    const row = (nodes: number, discover: number, trip: number | undefined, failures?: number): ScaleRow => ({
      nodes, passed: true, why: [], wall_s: 1, processes: 1, nodes_per_process: [nodes],
      quiet_discover: { p50: discover, p99: discover, n: 100 },
      ...(trip === undefined ? {} : { quiet_round_trip: { p50: trip, p99: trip, n: 100 } }),
      ...(failures === undefined ? {} : { quiet_discover_work: { lookups: 100, answers_per_lookup: 0, providers_per_lookup: 0, cards_per_lookup: 0, held_asks_per_lookup: 0, held_cards_per_lookup: 0, empty: 0, machine_busy: 0, machine_busy_idle: 0, dials_per_lookup: 0, round_trip_failures: failures } })
    })
    // 5 ms in 1 ms round trips at 50 nodes, 13 ms in 2 ms ones at 500: 6.5 trips, x1.30 of 5
    const line = roundTripLine([row(500, 13, 2, 3), row(50, 5, 1)])
    expect(line).toContain('p50: 1.00 ms at 50 nodes, 2.00 ms at 500 nodes (3 failed).')
    expect(line).toContain('5.0 at 50 nodes, 6.5 at 500 nodes; against 50 nodes ×1.30 at 500 nodes (ln N ×1.59).')
    // rows from before session 68 have no round trip: nothing to compare
    expect(roundTripLine([row(50, 5, undefined), row(500, 13, 2)])).toContain('Not enough sizes')
  })

  it('shows, per size at rest, the asks by key, the holder cards not backed when they came and the cards refused', () => {
    const work = (extra: Partial<QuietWork>): QuietWork => ({ lookups: 100, answers_per_lookup: 0.4, providers_per_lookup: 8, cards_per_lookup: 0.9, held_asks_per_lookup: 0.4, held_cards_per_lookup: 12.8, empty: 0, machine_busy: 0.8, machine_busy_idle: 0.05, dials_per_lookup: 0.88, ...extra })
    const row = (nodes: number, w: QuietWork): ScaleRow => ({ nodes, passed: true, why: [], wall_s: 1, processes: 1, nodes_per_process: [nodes], quiet_discover: { p50: 5, p99: 9, n: 100 }, quiet_discover_work: w })
    const lines = quietTable([row(500, work({ key_asks_per_lookup: 1.98, unbacked_share: 957 / 1277, rejected_per_lookup: 1.75 })), row(50, work({}))], r => [r.quiet_discover, undefined, r.quiet_discover_work])
    expect(lines[0]).toContain('| holder asks / cards from holders per lookup | asks by key per lookup | holder cards not backed when they came | cards refused per lookup | connections dialed per lookup |')
    // as many separators as columns
    expect(lines[1]?.split('|').length).toBe(lines[0]?.split('|').length)
    expect(lines[2]).toContain('| 0.40 / 12.8 | 1.98 | 75 % | 1.75 | 0.88 |')
    // a row made before session 70 has no such counts
    expect(lines[3]).toContain('| 0.40 / 12.8 | – | – | – | 0.88 |')
  })

  it('compares the requests a discover makes per lookup with log N', () => {
    const row = (nodes: number, answers: number, cards: number): ScaleRow => ({
      nodes, passed: true, why: [], wall_s: 1, processes: 1, nodes_per_process: [nodes],
      discover_work: { lookups: 40, answers_per_lookup: answers, providers_per_lookup: 10, cards_per_lookup: cards, held_asks_per_lookup: 0, held_cards_per_lookup: 0 }
    })
    expect(workLine([row(50, 1.3, 2.6), row(500, 1.7, 2.9)])).toMatch(/×1\.18 at 500 nodes \(ln N ×1\.59\): no faster than log N/)
    expect(workLine([row(50, 1, 1), row(100, 4, 4), row(200, 1, 1)])).toMatch(/×4\.00 at 100 nodes .*: faster than log N at 100 nodes\.$/)
    expect(workLine([row(50, 1, 1)])).toContain('Not enough sizes')
  })
})
