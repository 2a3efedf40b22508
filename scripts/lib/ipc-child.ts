/**
 * A benchmark's worker process on an IPC channel (scripts/lib/*-worker.ts):
 * started with `fork`, ready when it sends `{ type: 'ready', ... }`, asked
 * with `{ id, op, ... }` and answered with `{ type: 'reply', id, value | error }`;
 * any other message goes to `onMessage`. Every wait is bounded; a child that
 * dies answers every pending request with an error.
 */
import { fork, type ChildProcess } from 'node:child_process'

export interface IpcMessage { type: string, id?: number, value?: unknown, error?: string, [key: string]: unknown }

export interface IpcChild {
  proc: ChildProcess
  /** The ready message. */
  ready: IpcMessage
  pending: Map<number, (r: IpcMessage | null) => void>
  nextId: number
}

export async function withTimeout<T> (p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const t = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => { reject(new Error(`${what} timed out after ${ms} ms`)) }, ms) })
  try {
    return await Promise.race([p, t])
  } finally {
    clearTimeout(timer)
  }
}

export async function spawnIpcChild (script: string, args: string[], startTimeoutMs: number, onMessage: (msg: IpcMessage) => void = () => {}): Promise<IpcChild> {
  const proc = fork(script, args, { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] })
  const pending = new Map<number, (r: IpcMessage | null) => void>()
  const ready = Promise.withResolvers<IpcMessage>()
  proc.on('message', (msg: IpcMessage) => {
    if (msg.type === 'ready') { ready.resolve(msg); return }
    if (msg.type !== 'reply') { onMessage(msg); return }
    const p = pending.get(msg.id ?? -1)
    pending.delete(msg.id ?? -1)
    p?.(msg)
  })
  proc.on('exit', (code, signal) => {
    ready.reject(new Error(`${script} exited (${code ?? signal}) before it was ready`))
    for (const p of pending.values()) p(null)
    pending.clear()
  })
  try {
    return { proc, ready: await withTimeout(ready.promise, startTimeoutMs, `${script} start`), pending, nextId: 1 }
  } catch (err) {
    proc.kill('SIGKILL')
    throw err
  }
}

export async function ask (c: IpcChild, msg: Record<string, unknown>, timeoutMs: number): Promise<unknown> {
  const id = c.nextId++
  const reply = new Promise<IpcMessage | null>(resolve => { c.pending.set(id, resolve) })
  c.proc.send({ ...msg, id })
  const r = await withTimeout(reply, timeoutMs, `worker ${String(msg.op)}`)
  if (r === null) throw new Error(`worker died during ${String(msg.op)}`)
  if (r.error !== undefined) throw new Error(`worker ${String(msg.op)}: ${r.error}`)
  return r.value
}

export async function stopIpcChild (c: IpcChild): Promise<void> {
  if (c.proc.exitCode !== null || c.proc.signalCode !== null) return
  const exited = new Promise<void>(resolve => { c.proc.once('exit', () => { resolve() }) })
  c.proc.kill('SIGTERM')
  await exited
}

/**
 * The worker's side: answer each request with `answer`, stop `nodes` (then
 * exit) on SIGTERM or when the parent goes, and say ready with `ready`.
 */
export function serveIpcWorker<R extends { id: number }> (
  answer: (msg: R) => Promise<unknown>,
  nodes: Array<{ stop: () => Promise<void> }>,
  ready: Record<string, unknown>,
  log: (msg: string) => void
): void {
  const send = (msg: unknown): void => { process.send?.(msg) }
  process.on('message', (msg: R) => {
    answer(msg).then(
      value => { send({ type: 'reply', id: msg.id, value }) },
      (err: unknown) => { send({ type: 'reply', id: msg.id, error: String(err) }) }
    )
  })
  let stopping = false
  const stop = (): void => {
    if (stopping) return
    stopping = true
    Promise.all(nodes.map(async n => n.stop())).then(
      () => { process.exit(0) },
      (err: unknown) => { log(`stop failed: ${String(err)}`); process.exit(1) }
    )
  }
  process.on('SIGTERM', stop)
  process.on('disconnect', stop)
  send({ type: 'ready', ...ready })
}
