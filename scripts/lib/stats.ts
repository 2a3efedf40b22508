/**
 * Small statistics and table helpers shared by the benchmark scripts.
 *
 * Percentiles use the nearest-rank method on the sorted samples: the p-th
 * percentile is the sample at 1-based rank ceil(p/100 * n). With 2000 samples
 * p99 is therefore the 1980th smallest value, an observed latency rather than
 * an interpolated one.
 */

export interface LatencySummary {
  /** number of samples */
  n: number
  p50: number
  p90: number
  p99: number
  mean: number
  min: number
  max: number
}

/** Nearest-rank percentile of an ascending array; NaN when empty. */
export function percentile (sortedAsc: readonly number[], p: number): number {
  const n = sortedAsc.length
  if (n === 0) return Number.NaN
  if (p <= 0) return sortedAsc[0] ?? Number.NaN
  if (p >= 100) return sortedAsc[n - 1] ?? Number.NaN
  const rank = Math.ceil((p / 100) * n)
  return sortedAsc[Math.min(n, Math.max(1, rank)) - 1] ?? Number.NaN
}

/**
 * Summarise latency samples expressed in milliseconds. The input array is not
 * modified. An empty input yields n = 0 and NaN for every statistic.
 */
export function summarize (samplesMs: readonly number[]): LatencySummary {
  const sorted = Float64Array.from(samplesMs).sort()
  const asc = Array.from(sorted)
  const n = asc.length
  let sum = 0
  for (const v of asc) sum += v
  return {
    n,
    p50: percentile(asc, 50),
    p90: percentile(asc, 90),
    p99: percentile(asc, 99),
    mean: n === 0 ? Number.NaN : sum / n,
    min: n === 0 ? Number.NaN : (asc[0] ?? Number.NaN),
    max: n === 0 ? Number.NaN : (asc[n - 1] ?? Number.NaN)
  }
}

/**
 * Format a duration in milliseconds for humans: microseconds below 0.1 ms,
 * seconds from 10 s up, milliseconds (3 significant-ish digits) otherwise.
 */
export function fmtMs (ms: number): string {
  if (!Number.isFinite(ms)) return '-'
  const abs = Math.abs(ms)
  if (abs < 0.1) return `${(ms * 1000).toFixed(1)} µs`
  if (abs < 10) return `${ms.toFixed(2)} ms`
  if (abs < 10_000) return `${ms.toFixed(1)} ms`
  return `${(ms / 1000).toFixed(2)} s`
}

/** Format a rate (per second) with thousands grouping and no decimals. */
export function fmtRate (perSec: number): string {
  if (!Number.isFinite(perSec)) return '-'
  return Math.round(perSec).toLocaleString('en-US')
}

function cellText (v: string | number | undefined): string {
  if (v === undefined) return ''
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) return '-'
    return Number.isInteger(v) ? String(v) : v.toFixed(2)
  }
  return v
}

/**
 * Render rows as an aligned plain-text table. Columns are the union of the
 * rows' keys in first-seen order; numeric cells are right-aligned, text cells
 * left-aligned.
 */
export function formatTable (rows: ReadonlyArray<Record<string, string | number>>): string {
  const columns: string[] = []
  for (const row of rows) {
    for (const key of Object.keys(row)) {
      if (!columns.includes(key)) columns.push(key)
    }
  }
  if (columns.length === 0) return ''

  const numeric = columns.map(col => rows.every(r => r[col] === undefined || typeof r[col] === 'number'))
  const body = rows.map(r => columns.map(col => cellText(r[col])))
  const widths = columns.map((col, i) => Math.max(col.length, ...body.map(cells => (cells[i] ?? '').length)))

  const line = (cells: readonly string[]): string =>
    cells.map((c, i) => {
      const w = widths[i] ?? 0
      return numeric[i] === true ? c.padStart(w) : c.padEnd(w)
    }).join('  ').trimEnd()

  const out = [
    line(columns),
    widths.map(w => '-'.repeat(w)).join('  '),
    ...body.map(cells => line(cells))
  ]
  return out.join('\n')
}

/** Print rows as an aligned table on stdout. */
export function printTable (rows: ReadonlyArray<Record<string, string | number>>): void {
  const text = formatTable(rows)
  if (text !== '') process.stdout.write(text + '\n')
}

/** Error thrown when too many requests of a measured phase failed. */
export class PhaseFailedError extends Error {
  override name = 'PhaseFailedError'
  readonly failures: number
  readonly attempts: number
  constructor (phase: string, failures: number, attempts: number, cause: unknown) {
    super(`${phase}: ${failures}/${attempts} requests failed; first error: ${cause instanceof Error ? cause.message : String(cause)}`, { cause })
    this.failures = failures
    this.attempts = attempts
  }
}

export interface PhaseResult {
  /** latency of each successful request, ms */
  samplesMs: number[]
  /** wall-clock duration of the whole phase, ms */
  elapsedMs: number
  ok: number
  errors: number
  /** successful requests per second over the phase */
  reqPerSec: number
}

export interface PhaseOptions {
  /** used in error messages */
  name: string
  /** fraction of failed requests tolerated before the phase throws; default 0.01 */
  maxErrorRate?: number
}

/**
 * Run `total` calls of `op` with at most `concurrency` in flight (a closed
 * loop: each worker starts its next call as soon as the previous one settles)
 * and time each call. `concurrency` 1 is the sequential case. `op` receives
 * the request index and is responsible for its own timeout.
 */
export async function runPhase (
  total: number,
  concurrency: number,
  op: (i: number) => Promise<void>,
  opts: PhaseOptions
): Promise<PhaseResult> {
  const samplesMs: number[] = []
  let errors = 0
  let firstError: unknown
  let next = 0
  const workers = Math.max(1, Math.min(concurrency, total))

  const worker = async (): Promise<void> => {
    while (next < total) {
      const i = next++
      const t0 = performance.now()
      try {
        await op(i)
        samplesMs.push(performance.now() - t0)
      } catch (err) {
        errors++
        firstError ??= err
      }
    }
  }

  const start = performance.now()
  await Promise.all(Array.from({ length: workers }, worker))
  const elapsedMs = performance.now() - start

  const maxErrorRate = opts.maxErrorRate ?? 0.01
  if (errors > 0 && (errors > total * maxErrorRate || samplesMs.length === 0)) {
    throw new PhaseFailedError(opts.name, errors, total, firstError)
  }
  return {
    samplesMs,
    elapsedMs,
    ok: samplesMs.length,
    errors,
    reqPerSec: elapsedMs > 0 ? samplesMs.length / (elapsedMs / 1000) : Number.NaN
  }
}

export interface RequestBenchOptions {
  /** label for errors */
  name: string
  /** measured sequential requests (concurrency 1) */
  requests: number
  /** requests in flight during the throughput phase; 0 skips that phase */
  concurrency: number
  /** measured requests in the throughput phase; default max(concurrency, 2.5 * requests) */
  concurrentRequests?: number
  /** unmeasured requests before each phase; default 10% of requests (at least 1) */
  warmup?: number
  maxErrorRate?: number
}

export interface RequestBenchResult {
  /** latency of the sequential phase (one request in flight) */
  latency: LatencySummary
  /** rate achieved by the sequential phase */
  sequentialReqPerSec: number
  /** rate achieved with `concurrency` requests in flight (NaN if skipped) */
  reqPerSec: number
  /** per-request latency observed during the throughput phase */
  concurrentLatency: LatencySummary
  concurrency: number
  warmup: number
  sequentialRequests: number
  concurrentRequests: number
  /** failed requests across measured phases (warm-up excluded) */
  errors: number
}

/**
 * Standard two-phase measurement: warm-up then `requests` sequential calls
 * (latency), warm-up at `concurrency` then `concurrentRequests` calls with
 * `concurrency` in flight (throughput).
 */
export async function benchRequests (op: (i: number) => Promise<void>, opts: RequestBenchOptions): Promise<RequestBenchResult> {
  const warmup = opts.warmup ?? Math.max(1, Math.round(opts.requests / 10))
  const concurrentRequests = opts.concurrency > 0
    ? (opts.concurrentRequests ?? Math.max(opts.concurrency, Math.round(opts.requests * 2.5)))
    : 0
  const base = { maxErrorRate: opts.maxErrorRate }
  let counter = 0
  const call = async (): Promise<void> => { await op(counter++) }

  if (warmup > 0) await runPhase(warmup, 1, call, { ...base, name: `${opts.name} warm-up` })
  const seq = await runPhase(opts.requests, 1, call, { ...base, name: `${opts.name} sequential` })

  let conc: PhaseResult | undefined
  if (concurrentRequests > 0) {
    if (warmup > 0) await runPhase(Math.max(warmup, opts.concurrency), opts.concurrency, call, { ...base, name: `${opts.name} concurrent warm-up` })
    conc = await runPhase(concurrentRequests, opts.concurrency, call, { ...base, name: `${opts.name} concurrent` })
  }

  return {
    latency: summarize(seq.samplesMs),
    sequentialReqPerSec: seq.reqPerSec,
    reqPerSec: conc?.reqPerSec ?? Number.NaN,
    concurrentLatency: summarize(conc?.samplesMs ?? []),
    concurrency: opts.concurrency,
    warmup,
    sequentialRequests: opts.requests,
    concurrentRequests,
    errors: seq.errors + (conc?.errors ?? 0)
  }
}
