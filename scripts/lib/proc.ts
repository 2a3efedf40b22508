/**
 * Spawn a helper Node process running a .ts script and wait, on events only,
 * until it announces readiness by printing one JSON line `{"ready":true,...}`
 * on stdout.
 *
 * Contract for child scripts:
 *  - print exactly one line `{"ready":true, ...info}` once they serve;
 *  - exit cleanly on SIGTERM and when their stdin reaches end-of-file (so a
 *    child never outlives a parent that died without calling stop()).
 */
import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { createInterface } from 'node:readline'

export type ChildStartFailure = 'timeout' | 'exit' | 'spawn-error' | 'bad-ready-line'

/** Raised when a child could not be brought to its ready state. */
export class ChildStartError extends Error {
  override name = 'ChildStartError'
  readonly reason: ChildStartFailure
  readonly script: string
  /** last part of the child's stderr, for diagnosis */
  readonly stderrTail: string
  readonly exitCode: number | null
  readonly signal: NodeJS.Signals | null

  constructor (reason: ChildStartFailure, script: string, detail: string, stderrTail: string,
    exitCode: number | null = null, signal: NodeJS.Signals | null = null, cause?: unknown) {
    super(`${script}: ${detail}${stderrTail === '' ? '' : `\n--- child stderr (tail) ---\n${stderrTail}`}`,
      cause === undefined ? undefined : { cause })
    this.reason = reason
    this.script = script
    this.stderrTail = stderrTail
    this.exitCode = exitCode
    this.signal = signal
  }
}

export interface ReadyInfo {
  ready: true
  [key: string]: unknown
}

export interface ReadyChild<I extends ReadyInfo = ReadyInfo> {
  /** the parsed ready line */
  info: I
  child: ChildProcess
  /** Terminate the child (SIGTERM, then SIGKILL after killAfterMs) and await its exit. */
  stop: () => Promise<void>
}

export interface SpawnReadyOptions {
  /** max time to wait for the ready line; default 30 s */
  timeoutMs?: number
  /** grace period after SIGTERM before SIGKILL in stop(); default 5 s */
  killAfterMs?: number
  env?: NodeJS.ProcessEnv
  cwd?: string
  /** extra flags for the node binary, placed before the script */
  nodeArgs?: string[]
  /** copy the child's stderr to ours once it is ready (default true) */
  forwardStderr?: boolean
  /** prefix for forwarded stderr lines; defaults to `[script] ` */
  label?: string
}

const STDERR_TAIL_CHARS = 4000

function exited (child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null
}

async function stopChild (child: ChildProcess, killAfterMs: number): Promise<void> {
  if (exited(child) || child.pid === undefined) return
  const gone = once(child, 'exit')
  child.stdin?.end()
  child.kill('SIGTERM')
  const timer = setTimeout(() => { if (!exited(child)) child.kill('SIGKILL') }, killAfterMs)
  try {
    await gone
  } finally {
    clearTimeout(timer)
  }
}

/**
 * Start `process.execPath [nodeArgs] script [args]` and resolve once it printed
 * its ready line. Rejects with ChildStartError on timeout, premature exit,
 * spawn failure or an unparsable ready line; the child is killed in that case.
 */
export async function spawnReady<I extends ReadyInfo = ReadyInfo> (
  script: string,
  args: readonly string[] = [],
  opts: SpawnReadyOptions = {}
): Promise<ReadyChild<I>> {
  const timeoutMs = opts.timeoutMs ?? 30_000
  const killAfterMs = opts.killAfterMs ?? 5_000
  const label = opts.label ?? `[${script.split('/').pop() ?? script}] `

  const child = spawn(process.execPath, [...(opts.nodeArgs ?? []), script, ...args], {
    cwd: opts.cwd,
    env: opts.env ?? process.env,
    stdio: ['pipe', 'pipe', 'pipe']
  })

  let stderrTail = ''
  let forwarding = false
  child.stderr.setEncoding('utf8')
  child.stderr.on('data', (chunk: string) => {
    stderrTail = (stderrTail + chunk).slice(-STDERR_TAIL_CHARS)
    if (forwarding) {
      const text = chunk.split('\n').filter(l => l !== '').map(l => label + l).join('\n')
      if (text !== '') process.stderr.write(text + '\n')
    }
  })
  // a broken stdin pipe (child gone) must not crash the parent
  child.stdin.on('error', () => {})

  const lines = createInterface({ input: child.stdout, crlfDelay: Infinity })

  try {
    const info = await new Promise<I>((resolve, reject) => {
      const cleanup = (): void => {
        clearTimeout(timer)
        lines.off('line', onLine)
        child.off('exit', onExit)
        child.off('error', onError)
      }
      const fail = (err: ChildStartError): void => { cleanup(); reject(err) }
      const onLine = (line: string): void => {
        const trimmed = line.trim()
        if (!trimmed.startsWith('{')) return // tolerate banner lines before the ready line
        let parsed: unknown
        try {
          parsed = JSON.parse(trimmed)
        } catch (err) {
          fail(new ChildStartError('bad-ready-line', script, `unparsable JSON line: ${trimmed.slice(0, 200)}`, stderrTail, null, null, err))
          return
        }
        if (typeof parsed === 'object' && parsed !== null && (parsed as { ready?: unknown }).ready === true) {
          cleanup()
          resolve(parsed as I)
        }
      }
      const onExit = (code: number | null, signal: NodeJS.Signals | null): void => {
        fail(new ChildStartError('exit', script, `exited before ready (code ${String(code)}, signal ${String(signal)})`, stderrTail, code, signal))
      }
      const onError = (err: Error): void => {
        fail(new ChildStartError('spawn-error', script, `spawn failed: ${err.message}`, stderrTail, null, null, err))
      }
      const timer = setTimeout(() => {
        fail(new ChildStartError('timeout', script, `no ready line within ${timeoutMs} ms`, stderrTail))
      }, timeoutMs)
      lines.on('line', onLine)
      child.once('exit', onExit)
      child.once('error', onError)
    })

    // keep draining stdout so a chatty child never blocks on a full pipe
    lines.on('line', () => {})
    forwarding = opts.forwardStderr ?? true

    let stopping: Promise<void> | undefined
    return {
      info,
      child,
      stop: async () => {
        stopping ??= stopChild(child, killAfterMs).finally(() => { lines.close() })
        await stopping
      }
    }
  } catch (err) {
    await stopChild(child, killAfterMs).catch(() => {})
    lines.close()
    throw err
  }
}

// ---------------------------------------------------------------------------
// Child-side helpers

/** Print the ready line expected by spawnReady(). */
export function announceReady (info: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify({ ...info, ready: true }) + '\n')
}

/**
 * Run `close` once on SIGTERM, SIGINT or end of stdin (parent gone), then exit.
 * Exits with code 1 if `close` throws or takes longer than `timeoutMs`.
 */
export function exitOnShutdown (close: () => Promise<void>, timeoutMs = 5_000): void {
  let closing = false
  const shutdown = (why: string): void => {
    if (closing) return
    closing = true
    const timer = setTimeout(() => {
      process.stderr.write(`shutdown (${why}) timed out after ${timeoutMs} ms\n`)
      process.exit(1)
    }, timeoutMs)
    timer.unref()
    close().then(() => { process.exit(0) }, (err: unknown) => {
      process.stderr.write(`shutdown (${why}) failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`)
      process.exit(1)
    })
  }
  process.once('SIGTERM', () => { shutdown('SIGTERM') })
  process.once('SIGINT', () => { shutdown('SIGINT') })
  process.stdin.on('end', () => { shutdown('stdin closed') })
  process.stdin.on('error', () => { shutdown('stdin error') })
  process.stdin.resume()
}

/**
 * Tiny `--name value` / `--flag` argv parser. With `usage` it is strict, as
 * scripts/lib/options.ts is for the simulation scripts: an option not in
 * `usage.known` or a stray argument ends the script with the reason and the
 * usage line on stderr, exit code 2 (no stack trace); `--help` prints the
 * usage and exits 0. Without it (internal workers) unknown options are kept.
 */
export function parseArgs (argv: readonly string[], usage?: { known: readonly string[], text: string }): Map<string, string> {
  if (usage !== undefined && (argv.includes('--help') || argv.includes('-h'))) {
    process.stdout.write(`${usage.text}\n`)
    process.exit(0)
  }
  const out = new Map<string, string>()
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if (a === undefined) continue
    if (!a.startsWith('--')) {
      if (usage !== undefined) usageError(`Unexpected argument '${a}'`, usage.text)
      continue
    }
    const eq = a.indexOf('=')
    if (eq > 0) {
      out.set(a.slice(2, eq), a.slice(eq + 1))
      continue
    }
    const next = argv[i + 1]
    if (next !== undefined && !next.startsWith('--')) {
      out.set(a.slice(2), next)
      i++
    } else {
      out.set(a.slice(2), 'true')
    }
  }
  if (usage !== undefined) {
    for (const k of out.keys()) if (!usage.known.includes(k)) usageError(`Unknown option '--${k}'`, usage.text)
  }
  return out
}

/** End the script on a bad command line: the reason and the usage on stderr, exit code 2. */
export function usageError (reason: string, usage?: string): never {
  process.stderr.write(`${reason}\n${usage === undefined ? '' : `${usage}\n`}`)
  process.exit(2)
}

/** Read a non-negative integer option, or the default; anything else is a usage error (exit 2). */
export function intArg (args: Map<string, string>, name: string, dflt: number): number {
  const raw = args.get(name)
  if (raw === undefined) return dflt
  const v = Number(raw)
  if (!Number.isInteger(v) || v < 0) usageError(`--${name} must be a non-negative integer, got ${JSON.stringify(raw)}`)
  return v
}
