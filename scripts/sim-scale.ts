/**
 * npm run sim:scale [-- --sizes 50,100,200,500 --tasks 40 --per-process 50 --out docs/scaling
 *                    --heap-at 200 --size-timeout-min 40 --merge --observers 3 --hostile 0.1 --concurrency 8 --seed 1
 *                    --quiet-discovers 100]
 *
 * Runs the simulation (scripts/sim.ts) at each size in turn, each in a fresh
 * process whose agents are spread over group processes of at most
 * --per-process nodes, and writes `<out>.md` and `<out>.json` (the scaling
 * report: invariants, connections per node against the bound, RSS per node,
 * latencies, discover p50 against log N) plus each size's own report under
 * `<out>/n<size>/`. The page is rewritten after every size, so a size that
 * fails or runs out of time is reported as such and the others are kept.
 * With --heap-at, a heap snapshot of one group process is taken at those
 * sizes (written under reports/, summarized in the page). With --merge, rows
 * of sizes not run this time are kept from the existing `<out>.json`. With
 * --rerender, nothing runs: the page is made again from `<out>.json` and each
 * size's report (after a change to the page, not to the simulation).
 * Exits non-zero when a size did not pass.
 */
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { cpus, totalmem } from 'node:os'
import { dirname, join } from 'node:path'
import { parseOptions } from './lib/options.ts'
import { bigBufferRetainers, summarizeHeapSnapshot } from '../src/sim/heap-summary.ts'
import { BUFFER_POOL_BYTES } from '../src/wire/network-constants.ts'
import type { SimReport } from '../src/sim/report.ts'
import { DRIVER_V8_FLAGS, SIM_PROCESS_FLAGS_RULE, simProcessEnv } from '../src/sim/group.ts'
import { discoverGrowth, failedRow, renderScaling, scaleRow, type ScaleRow, type ScalingDoc } from '../src/sim/scaling.ts'

const USAGE = `usage: npm run sim:scale [-- --sizes 50,100,200,500 --tasks 40 --per-process 50 --out docs/scaling
                           --heap-at 200 --heap-dir reports/scaling-heap --size-timeout-min 40 --merge --rerender
                           --observers 3 --hostile 0.1 --concurrency 8 --seed 1 --quiet-discovers 100 --quiet]`

const values = parseOptions({
  sizes: { type: 'string', default: '50,100,200,500' },
  tasks: { type: 'string', default: '40' },
  'per-process': { type: 'string', default: '50' },
  out: { type: 'string', default: 'docs/scaling' },
  'heap-at': { type: 'string', default: '200' },
  'heap-dir': { type: 'string', default: 'reports/scaling-heap' },
  'size-timeout-min': { type: 'string', default: '40' },
  merge: { type: 'boolean', default: false },
  rerender: { type: 'boolean', default: false },
  observers: { type: 'string' },
  hostile: { type: 'string' },
  concurrency: { type: 'string' },
  seed: { type: 'string' },
  'quiet-discovers': { type: 'string' },
  quiet: { type: 'boolean', default: false }
}, USAGE)

function fail (msg: string): never {
  process.stderr.write(`${msg}\n`)
  process.exit(2)
}
const list = (s: string): number[] => s.split(',').filter(x => x.trim() !== '').map(Number)
const sizes = list(values.sizes)
if (sizes.length === 0 || sizes.some(n => !Number.isInteger(n) || n < 6 || n > 1000)) fail('--sizes must be a comma-separated list of node counts between 6 and 1000')
const heapAt = new Set(list(values['heap-at']))
const num = (v: string, name: string): number => {
  const n = Number(v)
  if (!Number.isFinite(n) || n <= 0) fail(`--${name} must be a positive number`)
  return n
}
const tasks = num(values.tasks, 'tasks')
const perProcess = num(values['per-process'], 'per-process')
const sizeTimeoutMs = num(values['size-timeout-min'], 'size-timeout-min') * 60_000
const SIM_SCRIPT = new URL('./sim.ts', import.meta.url).pathname
const command = ['npm run sim:scale', ...(process.argv.length > 2 ? ['--', ...process.argv.slice(2)] : [])].join(' ')
const say = (line: string): void => { if (!values.quiet) process.stderr.write(`${line}\n`) }

/** Run one size in a process of its own; its report, or why there is none. */
async function runSize (nodes: number, heapSnapshot: string | undefined): Promise<{ report?: SimReport, why?: string, wallMs: number }> {
  const out = join(values.out, `n${nodes}`)
  await rm(join(out, 'report.json'), { force: true })
  const args = ['--expose-gc', ...DRIVER_V8_FLAGS, SIM_SCRIPT, '--nodes', String(nodes), '--tasks', String(tasks), '--per-process', String(perProcess), '--out', out, ...(values.quiet ? ['--quiet'] : [])]
  for (const k of ['observers', 'hostile', 'concurrency', 'seed', 'quiet-discovers'] as const) if (values[k] !== undefined) args.push(`--${k}`, String(values[k]))
  if (heapSnapshot !== undefined) args.push('--heap-snapshot', heapSnapshot)
  const t0 = Date.now()
  const child = spawn(process.execPath, args, { env: simProcessEnv(), stdio: ['ignore', values.quiet ? 'ignore' : 'inherit', 'pipe'] })
  // the simulation's progress lines, passed on; the last says how far a stopped size got
  let last = ''
  child.stderr.on('data', (b: Buffer) => {
    if (!values.quiet) process.stderr.write(b)
    const lines = b.toString().split('\n').map(l => l.trim()).filter(l => l !== '')
    last = lines[lines.length - 1] ?? last
  })
  let timedOut = false
  const timer = setTimeout(() => { timedOut = true; child.kill('SIGTERM') }, sizeTimeoutMs)
  const code = await new Promise<number | string>(resolve => { child.on('exit', (c, s) => { resolve(c ?? s ?? 'unknown') }) })
  clearTimeout(timer)
  const wallMs = Date.now() - t0
  if (timedOut) return { why: `did not finish within ${sizeTimeoutMs / 60_000} min (stopped; last progress: ${last.slice(0, 200) || 'none'})`, wallMs }
  const file = join(out, 'report.json')
  if (!existsSync(file)) return { why: `the simulation exited (${code}) without a report`, wallMs }
  return { report: JSON.parse(await readFile(file, 'utf8')) as SimReport, wallMs }
}

const jsonPath = `${values.out}.json`
const kept: ScaleRow[] = []
const keptHeap: NonNullable<ScalingDoc['heap']> = []
const commands = [command]
let docTasks = tasks
let docPerProcess = perProcess
let madeAt: string | undefined
if ((values.merge || values.rerender) && existsSync(jsonPath)) {
  const before = JSON.parse(await readFile(jsonPath, 'utf8')) as ScalingDoc & { commands?: string[] }
  const keep = values.rerender ? before.rows : before.rows.filter(r => !sizes.includes(r.nodes))
  for (const r of keep) {
    // a size that ran has its own report: its row is made again from it
    const file = join(values.out, `n${r.nodes}`, 'report.json')
    kept.push(r.invariants !== undefined && existsSync(file) ? scaleRow(JSON.parse(await readFile(file, 'utf8')) as SimReport) : r)
  }
  keptHeap.push(...(before.heap ?? []).filter(h => values.rerender || !sizes.includes(h.nodes)))
  if (values.rerender) {
    commands.splice(0, commands.length, ...(before.commands ?? [before.command]))
    docTasks = before.tasks
    docPerProcess = before.per_process
    madeAt = before.made_at
  } else if (kept.length > 0) {
    commands.unshift(...(before.commands ?? [before.command]))
  }
} else if (values.rerender) {
  fail(`--rerender needs ${jsonPath}`)
}
const rows: ScaleRow[] = [...kept]
const heap = [...keptHeap]

/**
 * Backing stores this large and larger are traced to what keeps them alive: a
 * slab of the Buffer pool (src/wire/buffer-pool.ts) is the smallest that
 * many small values can pin at once.
 */
const HELD_MIN_BYTES = BUFFER_POOL_BYTES

/** The heap snapshot of one group process at `nodes`, summarized onto the page. */
async function summarizeInto (nodes: number, snapshot: string, processNodes: number): Promise<void> {
  const top = await summarizeHeapSnapshot(snapshot)
  const held = await bigBufferRetainers(snapshot, HELD_MIN_BYTES)
  const at = heap.findIndex(h => h.nodes === nodes)
  if (at >= 0) heap.splice(at, 1)
  heap.push({
    nodes,
    process_nodes: processNodes,
    top: top.map(t => ({ what: t.what, mib: t.bytes / 2 ** 20, count: t.count })),
    held: held.map(t => ({ chain: t.chain, mib: t.bytes / 2 ** 20, count: t.count })),
    held_min_bytes: HELD_MIN_BYTES
  })
}

async function write (): Promise<void> {
  const doc: ScalingDoc & { commands: string[] } = {
    command: commands.join('` then `'),
    commands,
    made_at: madeAt ?? new Date().toISOString(),
    machine: `${cpus().length} × ${cpus()[0]?.model ?? 'unknown'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}`,
    per_process: docPerProcess,
    tasks: docTasks,
    group_flags: SIM_PROCESS_FLAGS_RULE,
    rows: [...rows].sort((a, b) => a.nodes - b.nodes),
    heap: [...heap].sort((a, b) => a.nodes - b.nodes)
  }
  const growth = discoverGrowth(doc.rows)
  if (growth !== undefined) doc.growth = growth
  const quietGrowth = discoverGrowth(doc.rows, 'quiet_discover')
  if (quietGrowth !== undefined) doc.quiet_growth = quietGrowth
  await mkdir(dirname(jsonPath), { recursive: true })
  await writeFile(jsonPath, `${JSON.stringify(doc, null, 2)}\n`)
  await writeFile(`${values.out}.md`, renderScaling(doc))
}

if (values.rerender) {
  // sizes whose report is there but not yet on the page (a size that finished after its sim:scale process stopped)
  const dirs = existsSync(values.out) ? await readdir(values.out) : []
  for (const d of dirs.filter(d => /^n\d+$/.test(d)).sort()) {
    const nodes = Number(d.slice(1))
    const file = join(values.out, d, 'report.json')
    if (rows.some(r => r.nodes === nodes) || !existsSync(file)) continue
    rows.push(scaleRow(JSON.parse(await readFile(file, 'utf8')) as SimReport))
  }
  for (const r of rows) {
    const snapshot = join(values['heap-dir'], `n${r.nodes}.heapsnapshot`)
    if (!existsSync(snapshot)) continue
    await summarizeInto(r.nodes, snapshot, r.nodes_per_process[1] ?? 0)
  }
  await write()
  process.stdout.write(`scaling report: ${values.out}.md (made again)\n`)
  process.exit(0)
}

for (const nodes of sizes) {
  say(`== ${nodes} nodes (${new Date().toISOString()})`)
  const snapshot = heapAt.has(nodes) ? join(values['heap-dir'], `n${nodes}.heapsnapshot`) : undefined
  if (snapshot !== undefined) await mkdir(values['heap-dir'], { recursive: true })
  const r = await runSize(nodes, snapshot)
  const row = r.report === undefined ? failedRow(nodes, r.wallMs, r.why ?? 'no report') : scaleRow(r.report)
  rows.push(row)
  if (snapshot !== undefined && existsSync(snapshot)) await summarizeInto(nodes, snapshot, r.report?.processes?.find(p => p.role === 'group')?.nodes ?? 0)
  await write()
  say(`== ${nodes} nodes: ${row.passed ? 'passes' : `fails: ${row.why.join('; ')}`} (${row.wall_s.toFixed(0)} s)`)
}
process.stdout.write(`scaling report: ${values.out}.md\n`)
process.exit(rows.every(r => r.passed) ? 0 : 1)
