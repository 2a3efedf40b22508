/**
 * The A2A tasks of one mesh agent as the inbound server shows them: a
 * bounded in-memory TaskStore for the SDK's request handler, with ListTasks
 * filtering and offset pagination. The mesh run behind each task stays the
 * source of truth (GetRun, replay); this keeps the A2A view of it.
 */
import type { ListTasksRequest, ListTasksResponse, Task } from '@a2a-js/sdk'
import type { ServerCallContext, TaskStore } from '@a2a-js/sdk/server'
import { RequestMalformedError } from '@a2a-js/sdk/errors'
import { TaskState } from '@a2a-js/sdk'
import { A2A_TASK_HISTORY_MAX } from './constants.ts'
import { isFinalState } from './mapping.ts'

export const LIST_PAGE_SIZE_DEFAULT = 50
export const LIST_PAGE_SIZE_MAX = 100

export class BoundedTaskStore implements TaskStore {
  private readonly tasks = new Map<string, Task>()
  private readonly max: number
  /** Told of each task dropped to stay within `max`, so what else is kept per task goes with it. */
  private readonly onEvict: ((taskId: string) => void) | undefined

  constructor (max: number, onEvict?: (taskId: string) => void) {
    this.max = max
    this.onEvict = onEvict
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
    this.tasks.set(task.id, structuredClone(over > 0 ? { ...task, history: task.history.slice(over) } : task))
    if (this.tasks.size <= this.max) return
    // drop the least recently written finished task, else the least recently written one
    let victim: string | undefined
    for (const [id, t] of this.tasks) {
      if (t.status !== undefined && isFinalState(t.status.state)) { victim = id; break }
    }
    const dropped = victim ?? this.tasks.keys().next().value as string
    this.count(this.tasks.get(dropped), -1)
    this.tasks.delete(dropped)
    this.onEvict?.(dropped)
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
