/**
 * The A2A tasks of one mesh agent as the inbound server shows them: a
 * bounded in-memory TaskStore for the SDK's request handler, with ListTasks
 * filtering and offset pagination. The mesh run behind each task stays the
 * source of truth (GetRun, replay); this keeps the A2A view of it.
 *
 * Three bounds: a count (past it a finished task goes, least recently written
 * first; a new task is admitted only while the open tasks and the new ones
 * admitted before it leave room under the count (`reserve`), so the handler
 * refuses a new task rather than push out an open one, whose client may be
 * about to resume it), bytes per agent (each task counted by the length of
 * its JSON when saved; past them finished tasks go, least recently written
 * first, and when only open ones are left the store is `full`: the handler
 * refuses new tasks), and bytes of every agent the server serves together
 * (TaskBytesPool: past them the least recently written finished task of any
 * agent goes, and when none is left every store is `full`).
 *
 * With records (task-records.ts) the tasks outlive the server: each save and
 * drop is written behind, the tasks are loaded again when the store is made
 * (`ready`: every open task, even past the count, and the finished ones the
 * count leaves room for), close() keeps them and release() deletes them.
 */
import type { ListTasksRequest, ListTasksResponse, Task } from '@a2a-js/sdk'
import type { ServerCallContext, TaskStore } from '@a2a-js/sdk/server'
import { RequestMalformedError } from '@a2a-js/sdk/errors'
import { TaskState } from '@a2a-js/sdk'
import { DelegationRefusedError } from '../errors.ts'
import { A2A_TASK_HISTORY_MAX, A2A_TASKS_MAX_BYTES, A2A_TASKS_MAX_BYTES_PER_AGENT } from './constants.ts'
import { isFinalState } from './mapping.ts'
import type { AgentTaskRecords } from './task-records.ts'

export const LIST_PAGE_SIZE_DEFAULT = 50
export const LIST_PAGE_SIZE_MAX = 100

/** What a full store refuses new tasks under: its own count or bytes, or the server's bytes; what it holds and that bound. */
export interface TaskBytesBound {
  bound: 'A2A_TASKS_MAX_PER_AGENT' | 'A2A_TASKS_MAX_BYTES_PER_AGENT' | 'A2A_TASKS_MAX_BYTES'
  /** Open tasks and new ones admitted (the count bound), else bytes. */
  bytes: number
  limit: number
}

/**
 * The task bytes of every agent of one inbound server together. Finished
 * tasks are kept here in the order they were last written, across agents, so
 * making room drops the oldest of any agent at once (open tasks are not in
 * that order: they are never dropped for bytes).
 */
export class TaskBytesPool {
  readonly maxBytes: number
  bytes = 0
  private readonly finished = new Map<string, { store: BoundedTaskStore, taskId: string }>()
  private stores = 0

  constructor (maxBytes = A2A_TASKS_MAX_BYTES) {
    this.maxBytes = maxBytes
  }

  /** At the bound with no finished task of any agent left to drop. */
  get full (): boolean {
    return this.bytes >= this.maxBytes && this.finished.size === 0
  }

  /** A name for a store's tasks in the pool's order. */
  storeKey (): string {
    return `${this.stores++}`
  }

  /** A task was written (its size changed by `delta`): finished ones move to the back of the order. */
  saved (key: string, store: BoundedTaskStore, taskId: string, delta: number, final: boolean): void {
    this.bytes += delta
    this.finished.delete(key)
    if (final) this.finished.set(key, { store, taskId })
  }

  dropped (key: string, size: number): void {
    this.bytes -= size
    this.finished.delete(key)
  }

  /** Finished tasks dropped to stay within `maxBytes`, any agent's. */
  droppedForBytes = 0

  /** Past the bound: drop finished tasks of any agent, least recently written first, except `but` (just saved). */
  makeRoom (but: string): void {
    while (this.bytes > this.maxBytes) {
      let victim: { store: BoundedTaskStore, taskId: string } | undefined
      for (const [k, v] of this.finished) {
        if (k !== but) {
          victim = v
          break
        }
      }
      if (victim === undefined) return
      victim.store.drop(victim.taskId)
      this.droppedForBytes++
    }
  }
}

/** A new task admitted, counted as open from its admission until its first save (or until the send that made it fails). */
export interface Reservation {
  /** The task it is for, once the executor knows it. */
  taskId?: string
  /** Still counted. */
  live: boolean
}

export class BoundedTaskStore implements TaskStore {
  private readonly tasks = new Map<string, Task>()
  /** The estimated size of each task (its JSON's length when saved). */
  private readonly sizes = new Map<string, number>()
  private readonly max: number
  readonly maxBytes: number
  /**
   * Told of each task dropped to stay within `max` or `maxBytes`, so what else is kept per task goes with it;
   * `open` is the task when it had not ended (its run may still wait for it: the handler ends that run).
   */
  private readonly onEvict: ((taskId: string, open: Task | undefined) => void) | undefined
  /** The sizes of the tasks held, together. */
  bytes = 0
  /** The server's bytes of every agent together (a pool of this store's own when none is given). */
  private readonly pool: TaskBytesPool
  private readonly poolKey: string

  /** Where the tasks are kept across restarts, if anywhere. */
  private readonly records: AgentTaskRecords | undefined
  /** Resolves once the tasks kept by an earlier server are loaded (at once without records); never rejects. */
  readonly ready: Promise<void>

  constructor (max: number, onEvict?: (taskId: string, open: Task | undefined) => void, maxBytes = A2A_TASKS_MAX_BYTES_PER_AGENT, pool?: TaskBytesPool, records?: AgentTaskRecords) {
    this.max = max
    this.onEvict = onEvict
    this.maxBytes = maxBytes
    this.pool = pool ?? new TaskBytesPool(Number.POSITIVE_INFINITY)
    this.poolKey = this.pool.storeKey()
    this.records = records
    this.ready = records === undefined ? Promise.resolve() : this.restore(records)
  }

  /**
   * Take the tasks the records hold, in the order they were written. Every open task is kept, even past the count
   * (the bound was lowered, or a failed delete left records): its client may be about to resume it, and reserve()
   * refuses new tasks while the open ones fill the count. Finished tasks fill the room left, the most recently
   * written ones; the others' records go, and nothing else was kept for them (onEvict is not told). The byte bounds
   * apply as to saves, which drop only finished tasks.
   */
  private async restore (records: AgentTaskRecords): Promise<void> {
    const tasks = await records.load(this.max, this.maxBytes)
    if (this.released) return
    let room = this.max - tasks.filter(t => !isFinished(t)).length
    const kept: Task[] = []
    for (const t of tasks.reverse()) {
      if (!isFinished(t) || room-- > 0) kept.push(t)
      else {
        records.mark(t.id, undefined)
        this.droppedAtLoad++
      }
    }
    for (const t of kept.reverse()) this.put(t, 'load')
  }

  /** Finished tasks not loaded at a restart, past the count (their records deleted). */
  droppedAtLoad = 0

  /** New tasks admitted whose first save has not come yet. */
  private reserved = 0
  /** Reservations by the task they are for, until its first save. */
  private readonly bound = new Map<string, Reservation>()

  /**
   * Admit one new task: its reservation, counted as an open task until its
   * first save or unreserve(). Throws DELEGATION_REFUSED (reason capacity,
   * naming the bound) when it does not fit (fullUnder).
   */
  reserve (): Reservation {
    const full = this.fullUnder()
    if (full !== undefined) {
      const whose = full.bound === 'A2A_TASKS_MAX_BYTES' ? 'this server\'s' : 'this agent\'s'
      const held = full.bound === 'A2A_TASKS_MAX_PER_AGENT' ? `are ${full.bytes} tasks` : `hold ${full.bytes} bytes`
      throw new DelegationRefusedError(`${whose} open A2A tasks ${held}, its bound (${full.bound} ${full.limit}); try again when some have ended`, { reason: 'capacity', limit: full.limit, bound: full.bound })
    }
    this.reserved++
    return { live: true }
  }

  /** The reservation's task is `taskId`: its first save takes the place reserved. */
  bind (r: Reservation, taskId: string): void {
    if (!r.live) return
    r.taskId = taskId
    this.bound.set(taskId, r)
  }

  /** The reservation is not counted any more (its task saved, or the send that made it ended without one). */
  unreserve (r: Reservation): void {
    if (!r.live) return
    r.live = false
    this.reserved--
    if (r.taskId !== undefined && this.bound.get(r.taskId) === r) this.bound.delete(r.taskId)
  }

  /** Whether the store holds the task (no copy made). */
  has (taskId: string): boolean {
    return this.tasks.has(taskId)
  }

  /** At the byte bound with no finished task left to drop: a new task would only add to open ones (the handler refuses it). */
  get full (): boolean {
    return this.fullUnder() !== undefined
  }

  /** The bound a full store refuses new tasks under: this agent's own first, else the server's. */
  fullUnder (): TaskBytesBound | undefined {
    // the open tasks and the new ones admitted fill the count: one more would push out an open task, whose
    // client may be about to resume it (finished tasks make room; open ones never do)
    const open = this.openTasks + this.reserved
    if (open >= this.max) return { bound: 'A2A_TASKS_MAX_PER_AGENT', bytes: open, limit: this.max }
    if (this.bytes >= this.maxBytes && this.oldestFinished() === undefined) return { bound: 'A2A_TASKS_MAX_BYTES_PER_AGENT', bytes: this.bytes, limit: this.maxBytes }
    if (this.pool.full) return { bound: 'A2A_TASKS_MAX_BYTES', bytes: this.pool.bytes, limit: this.pool.maxBytes }
    return undefined
  }

  /**
   * The store goes (its agent is no longer served): its bytes leave the
   * server's pool, it keeps nothing more, and its records are deleted.
   * Resolves when they are.
   */
  async release (): Promise<void> {
    for (const id of this.tasks.keys()) this.records?.mark(id, undefined)
    this.letGo()
    await this.records?.flush()
  }

  /** The server stops: the store takes no more saves and lets its tasks go, and resolves once their records are written. */
  async close (): Promise<void> {
    this.letGo()
    await this.records?.flush()
  }

  private letGo (): void {
    this.released = true
    for (const [id, size] of this.sizes) this.pool.dropped(this.key(id), size)
    this.tasks.clear()
    this.sizes.clear()
    this.bytes = 0
    this.openTasks = 0
  }

  private released = false

  /** Copies of the tasks not in a final state. */
  openList (): Task[] {
    return [...this.tasks.values()].filter(t => !(t.status !== undefined && isFinalState(t.status.state))).map(t => structuredClone(t))
  }

  private key (taskId: string): string {
    return `${this.poolKey}\u0000${taskId}`
  }

  get size (): number {
    return this.tasks.size
  }

  /** Tasks not in a final state (working, or waiting for input): a client may still come back for them. */
  get open (): number {
    return this.openTasks
  }

  private openTasks = 0
  private count (t: Task | undefined, by: number): void {
    if (t !== undefined && !(t.status !== undefined && isFinalState(t.status.state))) this.openTasks += by
  }

  /** Messages dropped from the front of task histories to keep each within A2A_TASK_HISTORY_MAX. */
  historyTrimmed = 0

  async save (task: Task, _context: ServerCallContext): Promise<void> {
    await this.ready
    if (this.released) return
    this.put(task, 'save')
  }

  /** Keep the task (written to the records when saved, not when loaded), then drop what the bounds say. */
  private put (task: Task, from: 'save' | 'load'): void {
    const held = this.tasks.has(task.id)
    if (!held) {
      const r = this.bound.get(task.id)
      if (r !== undefined) this.unreserve(r)
    }
    this.count(this.tasks.get(task.id), -1)
    this.count(task, 1)
    this.tasks.delete(task.id)
    // the SDK appends a message per status update and copies the whole task on each load and save
    const over = task.history.length - A2A_TASK_HISTORY_MAX
    if (over > 0) this.historyTrimmed += over
    const kept = structuredClone(over > 0 ? { ...task, history: task.history.slice(over) } : task)
    const size = JSON.stringify(kept).length
    const delta = size - (this.sizes.get(task.id) ?? 0)
    this.bytes += delta
    this.sizes.set(task.id, size)
    this.tasks.set(task.id, kept)
    this.pool.saved(this.key(task.id), this, task.id, delta, kept.status !== undefined && isFinalState(kept.status.state))
    if (from === 'save') this.records?.mark(task.id, kept)
    // past the count (restore() made room already): finished tasks, least recently written first, not the one just
    // saved (its client may read it next); open tasks loaded past the count stay. With no other finished task left,
    // a new task pushes out the least recently written one, which only a save past reserve() reaches (the handler
    // reserves each new task, so there is a finished one to drop)
    while (from === 'save' && this.tasks.size > this.max) {
      const victim = this.oldestFinished(task.id)
      if (victim === undefined) break
      this.drop(victim)
    }
    if (from === 'save' && !held && this.tasks.size > this.max) this.drop(this.oldestFinished() ?? this.tasks.keys().next().value as string)
    // past the bytes: finished tasks, least recently written first (not the one just saved: its client may read it next)
    while (this.bytes > this.maxBytes) {
      const victim = this.oldestFinished(task.id)
      if (victim === undefined) break
      this.drop(victim)
      this.droppedForBytes++
    }
    // past the server's bytes: the oldest finished task of any agent
    this.pool.makeRoom(this.key(task.id))
  }

  /** Finished tasks dropped to stay within `maxBytes`. */
  droppedForBytes = 0

  /** The least recently written task in a final state (other than `but`), if any. */
  private oldestFinished (but?: string): string | undefined {
    for (const [id, t] of this.tasks) {
      if (id !== but && t.status !== undefined && isFinalState(t.status.state)) return id
    }
    return undefined
  }

  /** Let a task go (to stay within a bound; the pool drops another agent's this way too). */
  drop (taskId: string): void {
    const t = this.tasks.get(taskId)
    this.count(t, -1)
    this.tasks.delete(taskId)
    const size = this.sizes.get(taskId) ?? 0
    this.bytes -= size
    this.pool.dropped(this.key(taskId), size)
    this.sizes.delete(taskId)
    this.records?.mark(taskId, undefined)
    this.onEvict?.(taskId, t !== undefined && !(t.status !== undefined && isFinalState(t.status.state)) ? t : undefined)
  }

  async load (taskId: string, _context: ServerCallContext): Promise<Task | undefined> {
    await this.ready
    const t = this.tasks.get(taskId)
    return t === undefined ? undefined : structuredClone(t)
  }

  async list (params: ListTasksRequest, _context: ServerCallContext): Promise<ListTasksResponse> {
    await this.ready
    const pageSize = params.pageSize ?? LIST_PAGE_SIZE_DEFAULT
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > LIST_PAGE_SIZE_MAX) {
      throw new RequestMalformedError(`pageSize must be an integer from 1 to ${LIST_PAGE_SIZE_MAX}`)
    }
    let offset = 0
    if (params.pageToken !== '') {
      offset = Number(params.pageToken)
      if (!/^[0-9]{1,9}$/.test(params.pageToken)) throw new RequestMalformedError('pageToken is not one this server issued')
    }
    const after = params.statusTimestampAfter === undefined ? undefined : Date.parse(params.statusTimestampAfter)
    const matching = [...this.tasks.values()].filter(t =>
      (params.contextId === '' || t.contextId === params.contextId) &&
      (params.status === TaskState.TASK_STATE_UNSPECIFIED || t.status?.state === params.status) &&
      (after === undefined || Number.isNaN(after) || Date.parse(t.status?.timestamp ?? '') > after))
    // newest status first; the id breaks ties so pages are stable
    matching.sort((a, b) => (b.status?.timestamp ?? '').localeCompare(a.status?.timestamp ?? '') || a.id.localeCompare(b.id))
    const page = matching.slice(offset, offset + pageSize).map(t => listView(t, params))
    const next = offset + pageSize
    return { tasks: page, nextPageToken: next < matching.length ? String(next) : '', pageSize, totalSize: matching.length }
  }
}

/** In a final state: no client comes back to resume it, so it may make room. */
function isFinished (t: Task): boolean {
  return t.status !== undefined && isFinalState(t.status.state)
}

/** A task as a ListTasks page shows it: a copy, its artifacts only when asked for, its history cut as asked. */
export function listView (t: Task, params: Pick<ListTasksRequest, 'includeArtifacts' | 'historyLength'>): Task {
  const copy = structuredClone(t)
  if (params.includeArtifacts !== true) copy.artifacts = []
  if (params.historyLength !== undefined) copy.history = params.historyLength <= 0 ? [] : copy.history.slice(-params.historyLength)
  return copy
}
