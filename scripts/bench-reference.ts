/**
 * Reference figures the mesh is compared against, measured side by side in
 * one run on this machine:
 *
 *  - raw libp2p echo, one new stream per request (TCP + Noise + Yamux): the floor;
 *  - raw libp2p echo, frames pipelined on one long-lived stream: the floor for
 *    a stream-reusing design (no per-request stream negotiation);
 *  - @a2a-js/sdk SendMessage answered with a WORKING task: the alternative a user would pick;
 *  - @a2a-js/sdk agent-card fetch.
 *
 * Each server runs in its own child process; the clients run in this process.
 *
 *   node scripts/bench-reference.ts [--requests 2000] [--concurrency 32]
 *     [--concurrent-requests 5000] [--warmup 200] [--payload 256] [--json]
 *
 * `--requests` is the number of measured sequential requests per reference;
 * the throughput phase defaults to 2.5x that and the warm-up to 10% of it.
 */
import { availableParallelism, cpus } from 'node:os'
import { fileURLToPath } from 'node:url'
import { intArg, parseArgs, spawnReady, usageError } from './lib/proc.ts'
import type { ReadyChild } from './lib/proc.ts'
import { measureA2aCardFetch, measureA2aSend } from './lib/ref-a2a.ts'
import type { A2aCardFetchResult, A2aSendResult } from './lib/ref-a2a.ts'
import { measureEcho } from './lib/ref-echo.ts'
import type { EchoResult } from './lib/ref-echo.ts'
import { fmtMs, fmtRate, printTable } from './lib/stats.ts'
import type { RequestBenchResult } from './lib/stats.ts'

export interface ReferenceOptions {
  /** measured sequential requests per reference (default 2000) */
  requests?: number
  /** in-flight requests in the throughput phase (default 32) */
  concurrency?: number
  /** measured requests in the throughput phase (default 2.5 x requests = 5000) */
  concurrentRequests?: number
  /** unmeasured requests before each phase (default 10% of requests = 200) */
  warmup?: number
  /** echo frame size in bytes (default 256) */
  payloadBytes?: number
  /** bound on each single request (default 10 s) */
  timeoutMs?: number
  /** bound on each server start (default 30 s) */
  startTimeoutMs?: number
  /** progress messages; default writes to stderr, pass () => {} to silence */
  log?: (msg: string) => void
}

export interface ReferenceFigures {
  /** raw libp2p echo, new stream per request */
  echo: EchoResult
  /** raw libp2p echo, one stream, pipelined frames */
  echoPipelined: EchoResult
  a2aSend: A2aSendResult
  a2aCard: A2aCardFetchResult
  env: { node: string, cpus: number, cpuModel: string, platform: string }
  /** wall-clock time of the whole run, ms */
  durationMs: number
}

const here = (rel: string): string => fileURLToPath(new URL(rel, import.meta.url))

function isString (v: unknown): v is string {
  return typeof v === 'string' && v !== ''
}

/**
 * Start both reference servers as child processes, measure the three
 * references one after another (never overlapping), stop everything and
 * return the figures.
 */
export async function runReferences (opts: ReferenceOptions = {}): Promise<ReferenceFigures> {
  const requests = opts.requests ?? 2000
  const concurrency = opts.concurrency ?? 32
  const common = {
    requests,
    concurrency,
    concurrentRequests: opts.concurrentRequests,
    warmup: opts.warmup,
    timeoutMs: opts.timeoutMs
  }
  const log = opts.log ?? ((msg: string) => { process.stderr.write(msg + '\n') })
  const started = performance.now()
  const children: ReadyChild[] = []

  try {
    log('reference: starting servers')
    const startOpts = { timeoutMs: opts.startTimeoutMs ?? 30_000 }
    const [echoSrv, a2aSrv] = await Promise.allSettled([
      spawnReady(here('./ref-server-echo.ts'), [], startOpts),
      spawnReady(here('./ref-server-a2a.ts'), [], startOpts)
    ])
    for (const s of [echoSrv, a2aSrv]) if (s.status === 'fulfilled') children.push(s.value)
    if (echoSrv.status === 'rejected') throw echoSrv.reason
    if (a2aSrv.status === 'rejected') throw a2aSrv.reason

    const addr = echoSrv.value.info.addr
    const url = a2aSrv.value.info.url
    if (!isString(addr)) throw new Error('echo server ready line has no addr')
    if (!isString(url)) throw new Error('a2a server ready line has no url')

    const payloadBytes = opts.payloadBytes ?? 256
    log(`reference: libp2p echo, new stream per request @ ${addr}`)
    const echo = await measureEcho({ ...common, addr, payloadBytes, mode: 'new-stream-per-request' })
    log('reference: libp2p echo, one pipelined stream')
    const echoPipelined = await measureEcho({ ...common, addr, payloadBytes, mode: 'one-stream-pipelined' })
    log(`reference: a2a SendMessage @ ${url}`)
    const a2aSend = await measureA2aSend({ ...common, url })
    log('reference: a2a agent-card fetch')
    const a2aCard = await measureA2aCardFetch({ ...common, url })

    return {
      echo,
      echoPipelined,
      a2aSend,
      a2aCard,
      env: {
        node: process.version,
        cpus: availableParallelism(),
        cpuModel: cpus()[0]?.model ?? 'unknown',
        platform: `${process.platform}-${process.arch}`
      },
      durationMs: performance.now() - started
    }
  } finally {
    await Promise.all(children.map(async c => { await c.stop() }))
  }
}

function row (name: string, r: RequestBenchResult): Record<string, string | number> {
  return {
    reference: name,
    p50: fmtMs(r.latency.p50),
    p90: fmtMs(r.latency.p90),
    p99: fmtMs(r.latency.p99),
    'seq req/s': fmtRate(r.sequentialReqPerSec),
    [`req/s @${r.concurrency}`]: fmtRate(r.reqPerSec),
    [`p50 @${r.concurrency}`]: fmtMs(r.concurrentLatency.p50),
    errors: r.errors
  }
}

/** Table rows for the figures (latency columns are from the sequential phase). */
export function referenceRows (f: ReferenceFigures): Array<Record<string, string | number>> {
  return [
    row(`raw libp2p echo (new stream/req, ${f.echo.payloadBytes} B)`, f.echo),
    row(`raw libp2p echo (1 stream pipelined, ${f.echoPipelined.payloadBytes} B)`, f.echoPipelined),
    row(`a2a-js SendMessage (${f.a2aSend.transport})`, f.a2aSend),
    row('a2a agent-card fetch', f.a2aCard)
  ]
}

/** Parse `--requests N --concurrency N --concurrent-requests N --warmup N --payload N --timeout MS`. */
export function parseReferenceArgs (argv: readonly string[]): ReferenceOptions & { json: boolean } {
  const args = parseArgs(argv, {
    known: ['requests', 'concurrency', 'concurrent-requests', 'warmup', 'payload', 'timeout', 'json'],
    text: 'usage: node scripts/bench-reference.ts [--requests 2000] [--concurrency 32] [--concurrent-requests 5000] [--warmup 200]\n' +
      '         [--payload 256] [--timeout <ms>] [--json]'
  })
  const opt = (name: string): number | undefined => args.has(name) ? intArg(args, name, 0) : undefined
  const requests = opt('requests')
  const concurrency = opt('concurrency')
  if (requests === 0) usageError('--requests must be at least 1')
  if (concurrency === 0) usageError('--concurrency must be at least 1')
  return {
    requests,
    concurrency,
    concurrentRequests: opt('concurrent-requests'),
    warmup: opt('warmup'),
    payloadBytes: opt('payload'),
    timeoutMs: opt('timeout'),
    json: args.has('json')
  }
}

async function main (): Promise<void> {
  const { json, ...opts } = parseReferenceArgs(process.argv.slice(2))
  const f = await runReferences(opts)
  if (json) {
    process.stdout.write(JSON.stringify(f, null, 2) + '\n')
    return
  }
  const e = f.echo
  process.stdout.write(`\nreference figures — ${f.env.node}, ${f.env.cpus} CPUs (${f.env.cpuModel}), ${f.env.platform}\n`)
  process.stdout.write(`sequential: ${e.sequentialRequests} requests after ${e.warmup} warm-up; ` +
    `throughput: ${e.concurrentRequests} requests with ${e.concurrency} in flight\n\n`)
  printTable(referenceRows(f))
  process.stdout.write(`\nlatency columns: sequential phase (1 in flight); run took ${(f.durationMs / 1000).toFixed(1)} s\n`)
}

if (import.meta.main) {
  main().catch((err: unknown) => {
    process.stderr.write(`bench-reference failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`)
    process.exitCode = 1
  })
}
