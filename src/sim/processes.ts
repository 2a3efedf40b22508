/**
 * Agents of a simulation that run as their own processes (`--processes`):
 * spawning one, asking it for an event of its log, stopping it.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import type { AgentCard } from '../card/card.ts'
import type { AgentEvent } from '../runlog/types.ts'
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

export async function spawnWorker (index: number, dataDir: string, bootstrap: string[]): Promise<{ worker: Worker, agentId: string, card: AgentCard }> {
  const child = spawn(process.execPath, [WORKER_SCRIPT, '--index', String(index), '--data-dir', dataDir, ...bootstrap.flatMap(b => ['--bootstrap', b])], {
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
  const ready = await withTimeout(new Promise<{ agent_id: string, card: AgentCard }>((resolve, reject) => {
    lines.once('line', (line) => {
      try { resolve(JSON.parse(line)) } catch (err) { reject(err) }
    })
    child.once('exit', (code) => { reject(new Error(`worker ${index} exited with ${code} before it was ready`)) })
  }), WORKER_START_TIMEOUT_MS, `worker ${index} start`)
  return { worker, agentId: ready.agent_id, card: ready.card }
}

async function workerLog (w: Worker, runId: string, seq: number): Promise<AgentEvent | undefined> {
  if (w.child.exitCode !== null || w.child.signalCode !== null) return undefined
  const id = w.nextId++
  const reply = new Promise<AgentEvent | null>(resolve => { w.pending.set(id, resolve) })
  w.child.send({ id, op: 'log', run_id: runId, seq })
  return (await withTimeout(reply, 10_000, 'worker log')) ?? undefined
}

export async function memberLog (m: Member, runId: string, seq: number): Promise<AgentEvent | undefined> {
  if (m.local !== undefined) return m.local.node.runs.store.log.get(runId, seq)
  if (m.worker !== undefined) return workerLog(m.worker, runId, seq)
  if (m.group !== undefined) return groupLog(m.group, m.agentId, runId, seq)
  return undefined
}

export async function stopWorker (w: Worker, signal: NodeJS.Signals): Promise<void> {
  if (w.child.exitCode !== null || w.child.signalCode !== null) return
  const exited = new Promise<void>(resolve => { w.child.once('exit', () => { resolve() }) })
  w.child.kill(signal)
  await exited
}

