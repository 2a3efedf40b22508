/**
 * Agents of a simulation that run as their own processes (`--processes`):
 * spawning one, asking it for an event of its log, stopping it.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import type { AgentCard } from '../card/card.ts'
import type { AgentEvent } from '../runlog/types.ts'
import { SIM_STOP_TIMEOUT_MS, WORKER_LOG_TIMEOUT_MS, WORKER_START_BATCH } from './constants.ts'
import { groupLog, type Group } from './group.ts'
import type { SimNode } from './mesh.ts'

export async function withTimeout<T> (p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const t = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => { reject(new Error(`${what} timed out after ${ms} ms`)) }, ms) })
  try {
    return await Promise.race([p, t])
  } finally {
    clearTimeout(timer)
  }
}

/** An agent that executes work: a node in this process, or a worker process. */
export interface Member {
  agentId: string
  card: AgentCard
  local?: SimNode
  worker?: Worker
  /** A member of a group process (group.ts). */
  group?: Group
  up: boolean
}

export interface Worker {
  index: number
  dataDir: string
  child: ChildProcess
  pending: Map<number, (event: AgentEvent | null) => void>
  nextId: number
}

const WORKER_SCRIPT = new URL('./worker.ts', import.meta.url).pathname
const WORKER_START_TIMEOUT_MS = 60_000

/**
 * Stop a child process: `signal`, and SIGKILL when it has not exited
 * `timeoutMs` later (SIM_STOP_TIMEOUT_MS unless told). Resolves once it has
 * exited; true when it had to be killed.
 */
export async function stopChild (child: ChildProcess, signal: NodeJS.Signals, timeoutMs = SIM_STOP_TIMEOUT_MS): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return false
  const exited = new Promise<void>(resolve => { child.once('exit', () => { resolve() }) })
  child.kill(signal)
  let killed = false
  const timer = setTimeout(() => { killed = true; child.kill('SIGKILL') }, timeoutMs)
  try {
    await exited
  } finally {
    clearTimeout(timer)
  }
  return killed
}

export interface SpawnedWorker { worker: Worker, agentId: string, card: AgentCard }

/**
 * Start worker `index` (worker.ts) and wait for its ready line, at most
 * `startTimeoutMs`. A worker that does not start (it exits, its line is no
 * JSON, the time runs out) is killed before the error goes on: no orphan.
 */
export async function spawnWorker (index: number, dataDir: string, bootstrap: string[], script = WORKER_SCRIPT, startTimeoutMs = WORKER_START_TIMEOUT_MS): Promise<SpawnedWorker> {
  const child = spawn(process.execPath, [script, '--index', String(index), '--data-dir', dataDir, ...bootstrap.flatMap(b => ['--bootstrap', b])], {
    stdio: ['ignore', 'pipe', 'inherit', 'ipc']
  })
  const worker: Worker = { index, dataDir, child, pending: new Map(), nextId: 1 }
  child.on('message', (msg: { id: number, event: AgentEvent | null }) => {
    const p = worker.pending.get(msg.id)
    worker.pending.delete(msg.id)
    p?.(msg.event)
  })
  child.on('exit', () => { for (const p of worker.pending.values()) p(null); worker.pending.clear() })
  const lines = createInterface({ input: child.stdout ?? process.stdin })
  try {
    const ready = await withTimeout(new Promise<{ agent_id: string, card: AgentCard }>((resolve, reject) => {
      lines.once('line', (line) => {
        try { resolve(JSON.parse(line)) } catch (err) { reject(new Error(`worker ${index}: its ready line is no JSON (${String(err)})`)) }
      })
      child.once('exit', (code) => { reject(new Error(`worker ${index} exited with ${code} before it was ready`)) })
    }), startTimeoutMs, `worker ${index} start`)
    return { worker, agentId: ready.agent_id, card: ready.card }
  } catch (err) {
    lines.close()
    await stopChild(child, 'SIGKILL')
    throw err
  }
}

/**
 * Start `count` workers (indexes from `first`), WORKER_START_BATCH at once.
 * When one does not start, the ones started are stopped before the error
 * goes on. `onBatch` is told how many have started.
 */
export async function spawnWorkers (first: number, count: number, workDir: string, bootstrap: string[], onBatch: (started: number) => void): Promise<SpawnedWorker[]> {
  const out: SpawnedWorker[] = []
  for (let i = 0; i < count; i += WORKER_START_BATCH) {
    const batch = await Promise.allSettled(Array.from({ length: Math.min(WORKER_START_BATCH, count - i) }, async (_, k) =>
      spawnWorker(first + i + k, join(workDir, `w${i + k}`), bootstrap)))
    for (const b of batch) if (b.status === 'fulfilled') out.push(b.value)
    const failed = batch.find(b => b.status === 'rejected')
    if (failed !== undefined) {
      await Promise.all(out.map(async w => stopWorker(w.worker, 'SIGTERM')))
      throw failed.reason
    }
    onBatch(i + batch.length)
  }
  return out
}

async function workerLog (w: Worker, runId: string, seq: number): Promise<AgentEvent | undefined> {
  if (w.child.exitCode !== null || w.child.signalCode !== null) return undefined
  const id = w.nextId++
  const reply = new Promise<AgentEvent | null>(resolve => { w.pending.set(id, resolve) })
  w.child.send({ id, op: 'log', run_id: runId, seq })
  return (await withTimeout(reply, WORKER_LOG_TIMEOUT_MS, 'worker log')) ?? undefined
}

export async function memberLog (m: Member, runId: string, seq: number): Promise<AgentEvent | undefined> {
  if (m.local !== undefined) return m.local.node.runs.store.log.get(runId, seq)
  if (m.worker !== undefined) return workerLog(m.worker, runId, seq)
  if (m.group !== undefined) return groupLog(m.group, m.agentId, runId, seq)
  return undefined
}

/** Stop a worker (SIGKILL when it has not exited within `timeoutMs`, stopChild); true when it had to be killed. */
export async function stopWorker (w: Worker, signal: NodeJS.Signals, timeoutMs = SIM_STOP_TIMEOUT_MS): Promise<boolean> {
  const killed = await stopChild(w.child, signal, timeoutMs)
  if (killed) process.stderr.write(`worker ${w.index} did not stop within ${timeoutMs} ms of ${signal}: killed\n`)
  return killed
}

