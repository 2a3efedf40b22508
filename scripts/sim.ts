/**
 * npm run sim [-- --nodes 20 --tasks 40 --concurrency 8 --observers 3 --latency 2 --jitter 1
 *              --hostile 0.1 --churn --processes --seed 1 --max-connections N --out reports/sim
 *              --per-process 50 --heap-snapshot file.heapsnapshot --quiet-discovers 100]
 *
 * Runs the Loops scenario on a mesh of real nodes in this process (memory
 * transport; with --processes the agents are separate node processes on TCP
 * loopback; with --per-process N the agents are spread over group processes
 * of at most N nodes each, one event loop per group), prints live progress and a summary, and writes the report as
 * JSON and as a self-contained HTML page. Exits non-zero when an invariant
 * (no run lost, no forgery accepted, every trace meets the four contracts) fails,
 * or when the processes' figures cover fewer nodes than the run had (a group
 * process died).
 */
import { mkdir, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { parseOptions } from './lib/options.ts'
import { DEFAULT_SCENARIO, runScenario } from '../src/sim/scenario.ts'
import { renderHtml, renderSummary } from '../src/sim/report.ts'
import { invariantProblems, measuredProblems } from '../src/sim/scaling.ts'
import { useNodeBufferPool } from '../src/wire/buffer-pool.ts'

// the driver's process runs nodes too: small buffers on small slabs (src/wire/buffer-pool.ts)
useNodeBufferPool()

const USAGE = `usage: npm run sim [-- --nodes 20 --tasks 40 --concurrency 8 --observers 3 --latency 2 --jitter 1
                     --hostile 0.1 --churn --processes --seed 1 --max-connections N --out reports/sim
                     --per-process 50 --heap-snapshot file.heapsnapshot --quiet-discovers 100 --quiet]`

const values = parseOptions({
  nodes: { type: 'string' },
  tasks: { type: 'string' },
  concurrency: { type: 'string' },
  observers: { type: 'string' },
  latency: { type: 'string' },
  jitter: { type: 'string' },
  hostile: { type: 'string' },
  churn: { type: 'boolean', default: false },
  processes: { type: 'boolean', default: false },
  seed: { type: 'string' },
  'max-connections': { type: 'string' },
  'per-process': { type: 'string' },
  'heap-snapshot': { type: 'string' },
  'quiet-discovers': { type: 'string' },
  out: { type: 'string', default: 'reports/sim' },
  quiet: { type: 'boolean', default: false }
}, USAGE)

function num (v: string | undefined, dflt: number, name: string): number {
  if (v === undefined) return dflt
  const n = Number(v)
  if (!Number.isFinite(n) || n < 0) {
    process.stderr.write(`--${name} must be a non-negative number\n`)
    process.exit(2)
  }
  return n
}

/** Discovers at rest of each kind: a whole number, at least 1 (the report divides by it). */
function quietDiscovers (v: string): number {
  const n = num(v, 0, 'quiet-discovers')
  if (!Number.isInteger(n) || n < 1) {
    process.stderr.write('--quiet-discovers must be a whole number of 1 or more\n')
    process.exit(2)
  }
  return n
}

const nodes = num(values.nodes, DEFAULT_SCENARIO.nodes, 'nodes')
const perProcess = values['per-process'] === undefined ? undefined : num(values['per-process'], 0, 'per-process')
// one event loop carries at most about 100 nodes; spread over group processes, more
const maxNodes = perProcess === undefined ? 400 : 1000
if (nodes < 6 || nodes > maxNodes) {
  process.stderr.write(`--nodes must be between 6 and ${maxNodes}\n`)
  process.exit(2)
}
// group processes hold nodes of the in-process scenario; the separate-process and churn scenarios place their own
if (perProcess !== undefined && (values.churn === true || values.processes === true)) {
  process.stderr.write('--per-process goes with neither --processes nor --churn\n')
  process.exit(2)
}
const tty = process.stderr.isTTY
const opts = {
  ...DEFAULT_SCENARIO,
  nodes,
  tasks: num(values.tasks, Math.max(DEFAULT_SCENARIO.tasks, nodes), 'tasks'),
  concurrency: num(values.concurrency, DEFAULT_SCENARIO.concurrency, 'concurrency'),
  observers: num(values.observers, DEFAULT_SCENARIO.observers, 'observers'),
  latencyMs: num(values.latency, DEFAULT_SCENARIO.latencyMs, 'latency'),
  jitterMs: num(values.jitter, DEFAULT_SCENARIO.jitterMs, 'jitter'),
  hostileShare: num(values.hostile, DEFAULT_SCENARIO.hostileShare, 'hostile'),
  churn: values.churn,
  processes: values.processes,
  seed: num(values.seed, DEFAULT_SCENARIO.seed, 'seed'),
  ...(perProcess === undefined ? {} : { perProcess }),
  ...(values['heap-snapshot'] === undefined ? {} : { heapSnapshot: values['heap-snapshot'] }),
  ...(values['max-connections'] === undefined ? {} : { maxConnections: num(values['max-connections'], 0, 'max-connections') }),
  ...(values['quiet-discovers'] === undefined ? {} : { quietDiscovers: quietDiscovers(values['quiet-discovers']) }),
  command: ['npm run sim', ...(process.argv.length > 2 ? ['--', ...process.argv.slice(2)] : [])].join(' '),
  onProgress: values.quiet
    ? undefined
    : (line: string) => { process.stderr.write(tty ? `\r\x1b[2K${line}` : `${line}\n`) }
}

const report = await runScenario(opts)
if (tty && !values.quiet) process.stderr.write('\n')
await mkdir(values.out, { recursive: true })
await writeFile(join(values.out, 'report.json'), JSON.stringify(report, null, 2))
await writeFile(join(values.out, 'report.html'), renderHtml(report))
process.stdout.write(`${renderSummary(report)}\nreport: ${join(values.out, 'report.html')}\n`)
// the invariants, and every node of the run measured (a group process that died leaves its nodes out)
const problems = [...invariantProblems(report), ...measuredProblems(report)]
for (const p of problems) process.stderr.write(`fails: ${p}\n`)
process.exit(problems.length === 0 ? 0 : 1)
