/**
 * The A2A tasks of one mesh agent as the inbound server shows them: a
 * bounded in-memory TaskStore for the SDK's request handler, with ListTasks
 * filtering and offset pagination. The mesh run behind each task stays the
 * source of truth (GetRun, replay); this keeps the A2A view of it.
 *
 * Two bounds: a count (past it a finished task goes, else the least recently
 * written one) and bytes (each task counted by the length of its JSON when
 * saved; past them finished tasks go, least recently written first, and when
 * only open ones are left the store is `full`: the handler refuses new tasks).
 */
import type { ListTasksRequest, ListTasksResponse, Task } from '@a2a-js/sdk'
import type { ServerCallContext, TaskStore } from '@a2a-js/sdk/server'
import { RequestMalformedError } from '@a2a-js/sdk/errors'
import { TaskState } from '@a2a-js/sdk'
import { A2A_TASK_HISTORY_MAX, A2A_TASKS_MAX_BYTES_PER_AGENT } from './constants.ts'
import { isFinalState } from './mapping.ts'

export const LIST_PAGE_SIZE_DEFAULT = 50
export const LIST_PAGE_SIZE_MAX = 100

export class BoundedTaskStore implements TaskStore {
  private readonly tasks = new Map<string, Task>()
  /** The estimated size of each task (its JSON's length when saved). */
  private readonly sizes = new Map<string, number>()
  private readonly max: number
  readonly maxBytes: number
  /** Told of each task dropped to stay within `max` or `maxBytes`, so what else is kept per task goes with it. */
  private readonly onEvict: ((taskId: string) => void) | undefined
  /** The sizes of the tasks held, together. */
  bytes = 0

  constructor (max: number, onEvict?: (taskId: string) => void, maxBytes = A2A_TASKS_MAX_BYTES_PER_AGENT) {
    this.max = max
    this.onEvict = onEvict
    this.maxBytes = maxBytes
  }

  /** At the byte bound with no finished task left to drop: a new task would only add to open ones (the handler refuses it). */
  get full (): boolean {
    return this.bytes >= this.maxBytes && this.oldestFinished() === undefined
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
    this.count(this.tasks.get(task.id), -1)
    this.count(task, 1)
    this.tasks.delete(task.id)
    // the SDK appends a message per status update and copies the whole task on each load and save
    const over = task.history.length - A2A_TASK_HISTORY_MAX
    if (over > 0) this.historyTrimmed += over
    const kept = structuredClone(over > 0 ? { ...task, history: task.history.slice(over) } : task)
    const size = JSON.stringify(kept).length
    this.bytes += size - (this.sizes.get(task.id) ?? 0)
    this.sizes.set(task.id, size)
    this.tasks.set(task.id, kept)
    // past the count: the least recently written finished task, else the least recently written one
    if (this.tasks.size > this.max) this.drop(this.oldestFinished() ?? this.tasks.keys().next().value as string)
    // past the bytes: finished tasks, least recently written first (not the one just saved: its client may read it next)
    while (this.bytes > this.maxBytes) {
      const victim = this.oldestFinished(task.id)
      if (victim === undefined) break
      this.drop(victim)
      this.droppedForBytes++
    }
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

  private drop (taskId: string): void {
    this.count(this.tasks.get(taskId), -1)
    this.tasks.delete(taskId)
    this.bytes -= this.sizes.get(taskId) ?? 0
    this.sizes.delete(taskId)
    this.onEvict?.(taskId)
  }

  async load (taskId: string, _context: ServerCallContext): Promise<Task | undefined> {
    const t = this.tasks.get(taskId)
    return t === undefined ? undefined : structuredClone(t)
  }

  async list (params: ListTasksRequest, _context: ServerCallContext): Promise<ListTasksResponse> {
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

/** A task as a ListTasks page shows it: a copy, its artifacts only when asked for, its history cut as asked. */
export function listView (t: Task, params: Pick<ListTasksRequest, 'includeArtifacts' | 'historyLength'>): Task {
  const copy = structuredClone(t)
  if (params.includeArtifacts !== true) copy.artifacts = []
  if (params.historyLength !== undefined) copy.history = params.historyLength <= 0 ? [] : copy.history.slice(-params.historyLength)
  return copy
}
