/**
 * Real processes for the CLI and sidecar tests: `aap-mesh` commands run to
 * completion, long-running ones (start, events --follow, example agents)
 * whose stdout JSON lines can be awaited as they come. No sleeps: every wait
 * is for a line, an exit, or a condition re-checked on output.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

export const root = fileURLToPath(new URL('..', import.meta.url))
export const MAIN = join(root, 'src/cli/main.ts')
export const LOOPBACK = ['--listen', '/ip4/127.0.0.1/tcp/0']

export type Line = Record<string, unknown>

/** A process whose stdout lines (and JSON lines) can be awaited. */
export class Proc {
  readonly proc: ChildProcess
  readonly lines: Line[] = []
  readonly text: string[] = []
  stderr = ''
  readonly exited: Promise<{ code: number | null, signal: NodeJS.Signals | null }>
  private readonly waiters = new Set<() => void>()

  constructor (command: string, args: string[], env: Record<string, string> = {}) {
    this.proc = spawn(command, args, { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } })
    this.proc.stderr?.setEncoding('utf8')
    this.proc.stderr?.on('data', (chunk: string) => {
      this.stderr += chunk
      this.wake()
    })
    createInterface({ input: this.proc.stdout! }).on('line', (text) => {
      this.text.push(text)
      if (text.startsWith('{')) {
        try { this.lines.push(JSON.parse(text) as Line) } catch { /* a line that only looks like JSON */ }
      }
      this.wake()
    })
    this.exited = new Promise(resolve => {
      this.proc.on('exit', (code, signal) => {
        // let the last stdout lines through before waiters are told
        setImmediate(() => {
          this.wake()
          resolve({ code, signal })
        })
      })
    })
  }

  get running (): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null
  }

  private wake (): void {
    for (const w of [...this.waiters]) w()
  }

  /** The first JSON line that matches, now or later; rejects if the process exits first. */
  async line (match: (l: Line) => boolean, what = 'a matching line'): Promise<Line> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const found = this.lines.find(match)
        if (found !== undefined) {
          this.waiters.delete(check)
          resolve(found)
        } else if (!this.running) {
          this.waiters.delete(check)
          reject(new Error(`process exited (${this.proc.exitCode ?? this.proc.signalCode}) before ${what}; stdout:\n${this.text.join('\n')}\nstderr:\n${this.stderr.slice(-3000)}`))
        }
      }
      this.waiters.add(check)
      check()
    })
  }

  async event (name: string, extra: (l: Line) => boolean = () => true): Promise<Line> {
    return this.line(l => l.event === name && extra(l), `"${name}"`)
  }

  async stop (signal: NodeJS.Signals = 'SIGTERM'): Promise<{ code: number | null, signal: NodeJS.Signals | null }> {
    if (this.running) this.proc.kill(signal)
    return this.exited
  }
}

export interface CliResult {
  code: number | null
  stdout: string
  stderr: string
  /** The last stdout line parsed as JSON (with --json), else undefined. */
  json: any
}

/** Run one aap-mesh command to completion. */
export async function cli (args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  const p = new Proc(process.execPath, [MAIN, ...args], env)
  const { code } = await p.exited
  const last = p.text.at(-1)
  let json: unknown
  if (last !== undefined && last.startsWith('{')) {
    try { json = JSON.parse(last) } catch { json = undefined }
  }
  return { code, stdout: p.text.join('\n'), stderr: p.stderr, json }
}

/** A node started with `aap-mesh start` in a temporary data directory. */
export class NodeProc extends Proc {
  readonly dataDir: string

  constructor (dataDir: string, args: string[]) {
    super(process.execPath, [MAIN, 'start', '--data-dir', dataDir, ...LOOPBACK, '--api-port', '0', '--log-level', 'warn', ...args])
    this.dataDir = dataDir
  }

  async started (): Promise<{ agentId: string, addresses: string[], api: string, metrics: string | null }> {
    const l = await this.event('started')
    return { agentId: l.agent_id as string, addresses: l.addresses as string[], api: l.api as string, metrics: l.metrics as string | null }
  }

  /** `aap-mesh <args> --data-dir <this node's>`. */
  async cli (args: string[]): Promise<CliResult> {
    return cli([...args, '--data-dir', this.dataDir])
  }
}

/** Temporary directories, removed by `cleanup`. */
export class TempDirs {
  private readonly dirs: string[] = []

  async make (prefix = 'aap-cli-'): Promise<string> {
    const d = await mkdtemp(join(tmpdir(), prefix))
    this.dirs.push(d)
    return d
  }

  async cleanup (): Promise<void> {
    await Promise.all(this.dirs.map(async d => rm(d, { recursive: true, force: true })))
  }
}
