/**
 * What the campaign's parts share: the echo capability of the target, child
 * processes driven over IPC, a seeded random source (so a run can be
 * repeated), and latency summaries.
 */
import { seeded } from '../../src/sim/scenario.ts'
import { fork, spawn, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { summarize } from '../lib/stats.ts'

export const ECHO = { capability_id: 'cap:campaign-echo', version: '1.0.0' }
/** The honest caller's pace: one delegation every this many ms. */
export const HONEST_CALL_INTERVAL_MS = 50
export const HONEST_CALL_TIMEOUT_MS = 30_000
/** The correlation the target follows, whose topic the spam part floods. */
export const SPAM_TASK = 'task-campaign-spam'
/** A child must be ready within this. */
const CHILD_READY_TIMEOUT_MS = 60_000
/** A child must answer a request within this. */
const CHILD_REQUEST_TIMEOUT_MS = 30_000

const CHILD_SCRIPT = fileURLToPath(new URL('./child.ts', import.meta.url))

export interface Child {
  proc: ChildProcess
  info: Record<string, unknown>
  /** Set once the child has exited, with its code or signal. */
  exited?: { code: number | null, signal: NodeJS.Signals | null }
  request: <T>(cmd: string) => Promise<T>
  stop: () => Promise<void>
}

/**
 * Fork child.ts in `role` and wait for its ready message. A child that is not
 * ready in time is killed (SIGKILL) before the start fails, so no process
 * outlives a failed start. `script` and `readyTimeoutMs` stand in for
 * child.ts and CHILD_READY_TIMEOUT_MS (tests).
 */
export async function startChild (args: string[], opts: { script?: string, readyTimeoutMs?: number } = {}): Promise<Child> {
  const readyTimeoutMs = opts.readyTimeoutMs ?? CHILD_READY_TIMEOUT_MS
  const proc = fork(opts.script ?? CHILD_SCRIPT, args, { execArgv: ['--expose-gc'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
  let next = 0
  const pending = new Map<number, (msg: Record<string, unknown>) => void>()
  const child: Child = {
    proc,
    info: {},
    request: async <T>(cmd: string): Promise<T> => {
      const id = ++next
      return new Promise<T>((resolve, reject) => {
        const timer = setTimeout(() => { pending.delete(id); reject(new Error(`child ${args[0]} did not answer ${cmd} within ${CHILD_REQUEST_TIMEOUT_MS} ms`)) }, CHILD_REQUEST_TIMEOUT_MS)
        pending.set(id, (msg) => { clearTimeout(timer); resolve(msg as T) })
        proc.send({ id, cmd })
      })
    },
    stop: async () => {
      if (child.exited !== undefined) return
      const gone = new Promise<void>(resolve => { proc.once('exit', () => { resolve() }) })
      proc.send({ id: ++next, cmd: 'stop' })
      const timer = setTimeout(() => { proc.kill('SIGKILL') }, CHILD_REQUEST_TIMEOUT_MS)
      await gone
      clearTimeout(timer)
    }
  }
  proc.on('exit', (code, signal) => { child.exited = { code, signal } })
  const ready = new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error(`child ${args[0]} not ready within ${readyTimeoutMs} ms (killed)`)) }, readyTimeoutMs)
    proc.once('exit', (code, signal) => { clearTimeout(timer); reject(new Error(`child ${args[0]} exited (${code ?? signal}) before it was ready`)) })
    proc.on('message', (msg: Record<string, unknown>) => {
      if (msg.type === 'ready') { clearTimeout(timer); resolve(msg) } else if (typeof msg.id === 'number') pending.get(msg.id)?.(msg)
    })
  })
  child.info = await ready
  return child
}

/** A small seeded PRNG (the simulation's mulberry32): the same seed gives the same campaign. */
export const prng = seeded

export interface LatencyFigures { n: number, p50: number, p99: number, max: number, failures: number }

export function latencyFigures (samples: number[], failures: number): LatencyFigures {
  const s = summarize(samples)
  const r = (x: number): number => Math.round(x * 10) / 10
  return { n: s.n, p50: r(s.p50), p99: r(s.p99), max: r(s.max), failures }
}

export function mb (bytes: number): number {
  return Math.round(bytes / 1024 / 1024 * 10) / 10
}

/** The honest peer's window of calls (child.ts `window`): latencies since the last window. */
export interface HonestWindow { latencies: number[], failures: number, errors: Record<string, number> }

/**
 * The control for "a misbehaving peer must not slow others down" on a
 * machine whose cores the attacker's own process shares: the honest peer's
 * calls during `windowMs` beside a process that burns one core and sends
 * nothing. Latency that rises this much is the machine's, not the target's.
 */
export async function besideBurner (honest: Child, windowMs: number): Promise<HonestWindow> {
  await honest.request<HonestWindow>('window')
  const burner = spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' })
  try {
    await new Promise(resolve => setTimeout(resolve, windowMs))
    return await honest.request<HonestWindow>('window')
  } finally {
    burner.kill('SIGKILL')
  }
}

/**
 * Wait until every promise has settled, then fail with the first failure:
 * unlike Promise.all, nothing is left running when it fails (kill9's
 * restarts: a child still starting must not outlive the cleanup).
 */
export async function settleAll (promises: Iterable<Promise<unknown>>): Promise<void> {
  const results = await Promise.allSettled(promises)
  for (const r of results) if (r.status === 'rejected') throw r.reason
}
