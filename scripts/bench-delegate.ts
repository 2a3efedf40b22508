/**
 * delegate -> durable Run handle, between two node PROCESSES on TCP loopback,
 * measured side by side with its references in the same run:
 *
 *  - raw libp2p echo (TCP + Noise + Yamux), one new stream per request: the
 *    floor targets.md compares the delegate p50 against (<= 1.5x);
 *  - raw libp2p echo, frames pipelined on one long-lived stream (context);
 *  - @a2a-js/sdk SendMessage answered with a WORKING task (<= 1.0x p50, and
 *    delegations/s >= its req/s).
 *
 * The executor runs in a child process (this file with --executor) with a
 * LevelDB data dir, so each handle is durable before it is returned; its
 * handler returns at once (the run then completes, which the executor also
 * commits). The delegator runs in this process, with its own LevelDB.
 *
 * Three delegate rows: `node.delegate` (the node API: the delegator also
 * follows the run's events, subscribing to its correlation topic and keeping
 * a copy of its log), `node.delegate` with `follow: false` (the node API
 * returning the handle only) and `node.runs.delegate` (the run service alone). Beside each, the
 * CPU time per delegation of each process (from /proc, Linux only), which
 * does not depend on what else the machine is running.
 *
 *   node scripts/bench-delegate.ts [--requests 2000] [--concurrency 32]
 *     [--concurrent-requests 5000] [--warmup 200] [--no-a2a] [--json]
 *     [--only node,nofollow,runs,echo,a2a] [--profile <dir>]
 *
 * --only measures only the rows named; --profile writes a CPU profile of the
 * executor process to <dir> (run this process with --cpu-prof for its own).
 */
import { generateKeyPairSync, sign as ed25519Sign, verify as ed25519Verify } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { availableParallelism, cpus, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createMeshNode } from '../src/node.ts'
import type { DelegateRequest } from '../src/runs/runtime.ts'
import { announceReady, exitOnShutdown, intArg, parseArgs, spawnReady, type ReadyChild } from './lib/proc.ts'
import { measureA2aSend } from './lib/ref-a2a.ts'
import { measureEcho } from './lib/ref-echo.ts'
import { benchRequests, fmtMs, fmtRate, printTable, type RequestBenchResult } from './lib/stats.ts'

const REVIEW = { capability_id: 'cap:code-review', version: '2.1.0' }
/** From targets.md. */
const TARGET_P50_VS_ECHO = 1.5
const TARGET_P50_VS_A2A = 1.0
/** The run service alone (`runs.delegate`) has the tighter target. */
const TARGET_RUNS_P50_VS_A2A = 0.8
const TARGET_RATE_A2A_FALLBACK = 2650

const here = (rel: string): string => fileURLToPath(new URL(rel, import.meta.url))
const log = (msg: string): void => { process.stderr.write(msg + '\n') }

// ---- the executor process ---------------------------------------------------------

async function executor (): Promise<void> {
  const dataDir = await mkdtemp(join(tmpdir(), 'aap-bench-executor-'))
  const node = await createMeshNode({ dataDir, listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
  await node.start()
  node.runs.handle(REVIEW, async () => ({ ok: true }))
  await node.publishCard({ name: 'bench-executor', capabilities: [REVIEW] })
  exitOnShutdown(async () => {
    await node.stop()
    await rm(dataDir, { recursive: true, force: true })
  })
  announceReady({ agentId: node.agentId, addrs: node.addresses, pid: process.pid })
}

// ---- the delegator (this process) ---------------------------------------------------

interface Options {
  requests: number
  concurrency: number
  concurrentRequests: number | undefined
  warmup: number | undefined
  a2a: boolean
  json: boolean
  /** Measure only these rows (node, runs, echo, a2a); all by default. */
  only: Set<string> | undefined
  /** Write CPU profiles of the executor process (and of this one, with --cpu-prof) here. */
  profileDir: string | undefined
}

function options (argv: readonly string[]): Options {
  const args = parseArgs(argv, {
    // --executor is how the bench starts its executor process
    known: ['requests', 'concurrency', 'concurrent-requests', 'warmup', 'no-a2a', 'json', 'executor', 'only', 'profile'],
    text: 'usage: node scripts/bench-delegate.ts [--requests 2000] [--concurrency 32] [--concurrent-requests 5000] [--warmup 200]\n' +
      '         [--no-a2a] [--json] [--only node,nofollow,runs,echo,a2a] [--profile <dir>]'
  })
  return {
    requests: intArg(args, 'requests', 2000),
    concurrency: intArg(args, 'concurrency', 32),
    concurrentRequests: args.has('concurrent-requests') ? intArg(args, 'concurrent-requests', 0) : undefined,
    warmup: args.has('warmup') ? intArg(args, 'warmup', 0) : undefined,
    a2a: !args.has('no-a2a'),
    json: args.has('json'),
    only: args.has('only') ? new Set((args.get('only') ?? '').split(',')) : undefined,
    profileDir: args.get('profile')
  }
}

/** CPU time (user + system) a process has used, ms; NaN where /proc is not there. */
function processCpuMs (pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? []
    return (Number(fields[11]) + Number(fields[12])) * 10 // clock ticks of 10 ms (USER_HZ 100)
  } catch {
    return Number.NaN
  }
}

interface DelegateResult extends RequestBenchResult {
  /** CPU per delegation over the whole measurement (warm-up included), µs */
  delegatorCpuUs: number
  executorCpuUs: number
}

async function measureDelegate (o: Options, executorInfo: { agentId: string, addrs: string[], pid: number }, api: 'node' | 'nofollow' | 'runs'): Promise<DelegateResult> {
  const dataDir = await mkdtemp(join(tmpdir(), 'aap-bench-delegator-'))
  const node = await createMeshNode({ dataDir, listen: ['/ip4/127.0.0.1/tcp/0'], localMesh: true })
  await node.start()
  try {
    if (await node.join(executorInfo.addrs) !== 1) throw new Error('could not reach the executor')
    let n = 0
    const cpu0 = process.cpuUsage()
    const exec0 = processCpuMs(executorInfo.pid)
    const delegate = api === 'node'
      ? node.delegate.bind(node)
      : api === 'nofollow' ? async (req: DelegateRequest) => node.delegate(req, { follow: false }) : node.runs.delegate.bind(node.runs)
    const result = await benchRequests(async () => {
      const run = await delegate({ to_agent: executorInfo.agentId, task_id: `task-bench-${n++}`, capability: REVIEW, input: { pr: n, repo: 'aap-mesh' } })
      if (run.state !== 'running' && run.state !== 'completed') throw new Error(`unexpected run state ${run.state}`)
    }, {
      name: `${api} delegate`,
      requests: o.requests,
      concurrency: o.concurrency,
      concurrentRequests: o.concurrentRequests,
      warmup: o.warmup
    })
    const cpu = process.cpuUsage(cpu0)
    return {
      ...result,
      delegatorCpuUs: (cpu.user + cpu.system) / n,
      executorCpuUs: (processCpuMs(executorInfo.pid) - exec0) * 1000 / n
    }
  } finally {
    await node.stop()
    await rm(dataDir, { recursive: true, force: true })
  }
}

/**
 * CPU of one Ed25519 signature and one verification here and now (node:crypto,
 * the node's own path), over a message the size of a run.started.
 */
function ed25519Costs (rounds = 3000): { signUs: number, verifyUs: number } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519')
  const msg = Buffer.alloc(600, 7)
  let sig = ed25519Sign(null, msg, privateKey)
  let t = process.cpuUsage()
  for (let i = 0; i < rounds; i++) sig = ed25519Sign(null, msg, privateKey)
  let d = process.cpuUsage(t)
  const signUs = (d.user + d.system) / rounds
  t = process.cpuUsage()
  for (let i = 0; i < rounds; i++) if (!ed25519Verify(null, msg, publicKey, sig)) throw new Error('verify failed')
  d = process.cpuUsage(t)
  return { signUs, verifyUs: (d.user + d.system) / rounds }
}

/** The a2a reference with the CPU it costs per request: this process (the client) and the server process. */
async function measureA2aWithCpu (common: Parameters<typeof measureA2aSend>[0], serverPid: number): Promise<Awaited<ReturnType<typeof measureA2aSend>> & { clientCpuUs: number, serverCpuUs: number }> {
  const cpu0 = process.cpuUsage()
  const srv0 = processCpuMs(serverPid)
  const r = await measureA2aSend(common)
  const cpu = process.cpuUsage(cpu0)
  const ops = r.sequentialRequests + r.concurrentRequests + r.warmup * (r.concurrentRequests > 0 ? 2 : 1)
  return { ...r, clientCpuUs: (cpu.user + cpu.system) / ops, serverCpuUs: (processCpuMs(serverPid) - srv0) * 1000 / ops }
}

function row (name: string, r: RequestBenchResult & Partial<DelegateResult>): Record<string, string | number> {
  return {
    what: name,
    p50: fmtMs(r.latency.p50),
    p99: fmtMs(r.latency.p99),
    'seq /s': fmtRate(r.sequentialReqPerSec),
    [`/s @${r.concurrency}`]: fmtRate(r.reqPerSec),
    [`p50 @${r.concurrency}`]: fmtMs(r.concurrentLatency.p50),
    'cpu/op delegator': r.delegatorCpuUs === undefined ? '' : `${r.delegatorCpuUs.toFixed(0)} µs`,
    'cpu/op executor': r.executorCpuUs === undefined ? '' : `${r.executorCpuUs.toFixed(0)} µs`,
    errors: r.errors
  }
}

function ratioRow (ratio: string, value: number, target: string, met: ((v: number) => boolean) | undefined): Record<string, string> {
  return { ratio, value: value.toFixed(2), target, met: met === undefined ? '-' : met(value) ? 'yes' : 'NO' }
}

async function main (): Promise<void> {
  const o = options(process.argv.slice(2))
  const want = (row: string): boolean => o.only === undefined || o.only.has(row)
  const children: ReadyChild[] = []
  try {
    log('bench-delegate: starting the executor, echo and a2a servers')
    const profileArgs = o.profileDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${o.profileDir}`]
    const exec = await spawnReady(here('./bench-delegate.ts'), ['--executor'], { timeoutMs: 60_000, nodeArgs: profileArgs })
    children.push(exec)
    const echoSrv = want('echo') ? await spawnReady(here('./ref-server-echo.ts')) : undefined
    if (echoSrv !== undefined) children.push(echoSrv)
    const a2aSrv = o.a2a && want('a2a') ? await spawnReady(here('./ref-server-a2a.ts')) : undefined
    if (a2aSrv !== undefined) children.push(a2aSrv)

    const common = { requests: o.requests, concurrency: o.concurrency, concurrentRequests: o.concurrentRequests, warmup: o.warmup }
    const agentId = exec.info.agentId
    const addrs = exec.info.addrs
    if (typeof agentId !== 'string' || !Array.isArray(addrs)) throw new Error('executor ready line lacks agentId/addrs')
    const info = { agentId, addrs: addrs.map(String), pid: Number(exec.info.pid) }
    let delegate: DelegateResult | undefined
    let runsOnly: DelegateResult | undefined
    let noFollow: DelegateResult | undefined
    if (want('node')) {
      log('bench-delegate: node.delegate')
      delegate = await measureDelegate(o, info, 'node')
    }
    if (want('nofollow')) {
      log('bench-delegate: node.delegate, follow: false')
      noFollow = await measureDelegate(o, info, 'nofollow')
    }
    if (want('runs')) {
      log('bench-delegate: node.runs.delegate')
      runsOnly = await measureDelegate(o, info, 'runs')
    }
    let echo: RequestBenchResult | undefined
    let echoPipelined: RequestBenchResult | undefined
    if (echoSrv !== undefined) {
      const addr = String(echoSrv.info.addr)
      log('bench-delegate: raw libp2p echo, new stream per request')
      echo = await measureEcho({ ...common, addr, payloadBytes: 256, mode: 'new-stream-per-request' })
      log('bench-delegate: raw libp2p echo, one pipelined stream')
      echoPipelined = await measureEcho({ ...common, addr, payloadBytes: 256, mode: 'one-stream-pipelined' })
    }
    const a2a = a2aSrv === undefined ? undefined : await measureA2aWithCpu({ ...common, url: String(a2aSrv.info.url) }, Number(a2aSrv.info.pid))
    const ed = ed25519Costs()

    const div = (a: number | undefined, b: number | undefined): number => a === undefined || b === undefined ? Number.NaN : a / b
    const ratios = {
      runs_p50_vs_echo: div(runsOnly?.latency.p50, echo?.latency.p50),
      runs_p50_vs_a2a: div(runsOnly?.latency.p50, a2a?.latency.p50),
      runs_rate_vs_a2a: div(runsOnly?.reqPerSec, a2a?.reqPerSec),
      p50_vs_echo: div(delegate?.latency.p50, echo?.latency.p50),
      p50_vs_echo_pipelined: div(delegate?.latency.p50, echoPipelined?.latency.p50),
      p50_vs_a2a: div(delegate?.latency.p50, a2a?.latency.p50),
      rate_vs_a2a: div(delegate?.reqPerSec, a2a?.reqPerSec),
      rate_vs_echo: div(delegate?.reqPerSec, echo?.reqPerSec)
    }
    const env = { node: process.version, cpus: availableParallelism(), cpuModel: cpus()[0]?.model ?? 'unknown' }
    if (o.json) {
      process.stdout.write(JSON.stringify({ delegate, noFollow, runsOnly, echo, echoPipelined, a2a, ed25519: ed, ratios, env }, null, 2) + '\n')
      return
    }
    const first = delegate ?? runsOnly ?? echo
    process.stdout.write(`\ndelegate -> durable Run handle, two processes on TCP loopback — ${env.node}, ${env.cpus} CPUs (${env.cpuModel})\n`)
    if (first !== undefined) process.stdout.write(`sequential: ${first.sequentialRequests} after ${first.warmup} warm-up; throughput: ${first.concurrentRequests} with ${first.concurrency} in flight\n\n`)
    printTable([
      ...(delegate === undefined ? [] : [row('node.delegate (follows events)', delegate)]),
      ...(noFollow === undefined ? [] : [row('node.delegate, follow: false', noFollow)]),
      ...(runsOnly === undefined ? [] : [row('node.runs.delegate (run service)', runsOnly)]),
      ...(echo === undefined ? [] : [row('raw libp2p echo, new stream/req (256 B)', echo)]),
      ...(echoPipelined === undefined ? [] : [row('raw libp2p echo, 1 stream pipelined (256 B)', echoPipelined)]),
      ...(a2a === undefined ? [] : [row(`a2a-js SendMessage (${a2a.transport})`, a2a)])
    ])
    const rateTarget = a2a?.reqPerSec ?? TARGET_RATE_A2A_FALLBACK
    const vs = a2a === undefined ? 'target' : 'a2a'
    const lowerEcho = (v: number): boolean => v <= TARGET_P50_VS_ECHO
    const atLeast = (v: number): boolean => v >= 1
    const rows: Array<Record<string, string>> = []
    for (const [name, r] of [['runs.delegate', runsOnly], ['node.delegate (follow: false)', noFollow], ['node.delegate', delegate]] as const) {
      if (r === undefined) continue
      if (echo !== undefined) rows.push(ratioRow(`${name} p50 / echo p50 (new stream)`, r.latency.p50 / echo.latency.p50, `<= ${TARGET_P50_VS_ECHO}`, lowerEcho))
      if (echoPipelined !== undefined) rows.push(ratioRow(`${name} p50 / echo p50 (pipelined)`, r.latency.p50 / echoPipelined.latency.p50, '-', undefined))
      const a2aTarget = name === 'runs.delegate' ? TARGET_RUNS_P50_VS_A2A : TARGET_P50_VS_A2A
      if (a2a !== undefined) rows.push(ratioRow(`${name} p50 / a2a p50`, r.latency.p50 / a2a.latency.p50, `<= ${a2aTarget}`, (v) => v <= a2aTarget))
      rows.push(ratioRow(`${name}/s @${r.concurrency} vs ${vs} (${fmtRate(rateTarget)}/s)`, r.reqPerSec / rateTarget, '>= 1.0', atLeast))
    }
    process.stdout.write('\n')
    printTable(rows)
    // what a delegation must sign and verify, against all the CPU the reference spends on a request
    const sigs = (signs: number, verifies: number): string => `${signs} signs + ${verifies} verifies = ${(signs * ed.signUs + verifies * ed.verifyUs).toFixed(0)} µs`
    const both = (r: DelegateResult): string => `${(r.delegatorCpuUs + r.executorCpuUs).toFixed(0)} µs`
    process.stdout.write('\nCPU per request, both processes, and the Ed25519 work a delegation cannot skip (measured here, node:crypto)\n')
    printTable([
      // ticket: signed by the delegator, checked by the executor; run.started and run.completed: signed by the
      // executor and, when the delegator follows, checked by it
      ...(delegate === undefined ? [] : [{ what: 'node.delegate (follows events)', 'cpu/op': both(delegate), 'of it Ed25519 at least': sigs(3, 3) }]),
      ...(runsOnly === undefined ? [] : [{ what: 'node.runs.delegate', 'cpu/op': both(runsOnly), 'of it Ed25519 at least': sigs(3, 1) }]),
      ...(a2a === undefined ? [] : [{ what: 'a2a-js SendMessage', 'cpu/op': `${(a2a.clientCpuUs + a2a.serverCpuUs).toFixed(0)} µs`, 'of it Ed25519 at least': 'none' }])
    ])
  } finally {
    await Promise.all(children.map(async c => { await c.stop() }))
  }
}

if (import.meta.main) {
  const run = process.argv.includes('--executor') ? executor() : main()
  run.catch((err: unknown) => {
    process.stderr.write(`bench-delegate failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`)
    process.exitCode = 1
  })
}
