/**
 * Tasks whose runs nothing follows, brought up to date when a client reads
 * them. A task waiting for input whose watch went (past
 * A2A_INPUT_WATCHES_MAX, for a new task's topic, or it never started) would
 * show its run's later moves no more: a resume, cancel, failure or handoff
 * made outside A2A. So GetTask, and the first entries of a ListTasks page,
 * read such a task's run from its executor (get_run, handoffs followed) and
 * save what the watch would have saved from its events.
 *
 * A task in a final state is not read again, but for one FAILED by its
 * delegator's verdict (EXECUTOR_LOST): the executor's events may overturn
 * the verdict (the run completed after all). The delegator's liveness keeps
 * offering the verdict to the executor until it is settled, and writes what
 * the executor answers to the delegator's own record of the run; so such a
 * task looks at that record only (a local read, no call to the executor),
 * and its run is read again only once the record no longer shows the
 * verdict.
 *
 * Reads are bounded: one at a time per task, at most one per
 * A2A_TASK_REFRESH_INTERVAL_MS per task, A2A_TASK_REFRESHES_MAX at once per
 * agent, each within A2A_TASK_REFRESH_TIMEOUT_MS. A read that fails leaves
 * the task as it was (counted and logged): the client gets what is saved.
 */
import { TaskState, type Task } from '@a2a-js/sdk'
import { AgentEvent as Bus, ResultManager, type DefaultExecutionEventBusManager, type ExecutionEventBus, type TaskStore } from '@a2a-js/sdk/server'
import type { Logger } from '../logger.ts'
import type { MeshNode } from '../node.ts'
import type { Run } from '../runlog/types.ts'
import { EXECUTOR_LOST } from '../runlog/verdict-shape.ts'
import { A2A_TASK_REFRESH_HANDOFFS_MAX, A2A_TASK_REFRESH_INTERVAL_MS, A2A_TASK_REFRESH_TIMEOUT_MS, A2A_TASK_REFRESHES_MAX, PART_FAILURE } from './constants.ts'
import { isFinalState, runIdOf, runToTask, runToUpdates, taskShowsRun, typedData } from './mapping.ts'
import { CONTEXT, saveToTask, toBusEvent } from './task-runs.ts'

export interface TaskRefreshHost {
  node: MeshNode
  log: Logger
  store: TaskStore
  buses: DefaultExecutionEventBusManager
  /** Aborted when the handler closes. */
  stopping: AbortSignal
  /** Something follows the task's run now (an execution, a watch, an A2A resume under way), so the task is kept up to date already. */
  followed: (taskId: string) => boolean
}

export class TaskRefresher {
  private readonly host: TaskRefreshHost
  /** When each open task's run was last read (tasks that end or are evicted go). */
  private readonly last = new Map<string, number>()
  /** Reads under way, by task. */
  private readonly pending = new Map<string, Promise<boolean>>()
  /**
   * Runs read; tasks saved with what was read; reads that failed (the task kept as it was); saves that
   * failed; reads not made because A2A_TASK_REFRESHES_MAX were under way; reads not saved because the task went,
   * ended or moved on while its run was read; looks at the delegator's own record of a verdict-failed task's run
   * that found the verdict standing (no read made).
   */
  readonly stats = { reads: 0, updated: 0, readErrors: 0, saveErrors: 0, busy: 0, raced: 0, verdictChecks: 0 }

  constructor (host: TaskRefreshHost) {
    this.host = host
  }

  /**
   * Whether reading the task would read its run: it is open (or failed by its delegator's verdict only, which
   * the executor's own events may still overturn), nothing follows its run, and it was not read lately.
   */
  due (task: Task, now = false): boolean {
    if (this.pending.has(task.id)) return true
    if (task.status !== undefined && isFinalState(task.status.state) && !byVerdict(task)) return false
    if (runIdOf(task) === undefined || this.host.followed(task.id) || this.host.stopping.aborted) return false
    return now || Date.now() - (this.last.get(task.id) ?? 0) >= A2A_TASK_REFRESH_INTERVAL_MS
  }

  /**
   * Bring the task up to date with its run when it is due; true when it was saved anew. Never throws. `now` reads
   * it whatever the interval (an A2A resume is checked against the run, not the task as saved: a write, not a poll).
   */
  async refresh (task: Task, now = false): Promise<boolean> {
    const under = this.pending.get(task.id)
    if (under !== undefined) return await under
    if (!this.due(task, now)) return false
    if (this.pending.size >= A2A_TASK_REFRESHES_MAX) {
      this.stats.busy++
      return false
    }
    this.last.set(task.id, Date.now())
    const read = this.read(task).finally(() => { this.pending.delete(task.id) })
    this.pending.set(task.id, read)
    return await read
  }

  /**
   * The execution of a task whose run the server stopped following (task-runs.ts: its correlation stayed busy here)
   * ends with the run as it is now, published on its bus, rather than with what it had published (a run blocked
   * or ended meanwhile shows so in the SendMessage answer). A read that fails leaves the task as it was (counted,
   * logged): a client's read brings it up to date later. Never throws.
   */
  async publishCurrent (runId: string, ids: { taskId: string, contextId: string }, bus: ExecutionEventBus): Promise<void> {
    let run: Run
    try {
      run = await this.current(runId)
    } catch (err) {
      this.stats.readErrors++
      this.host.log.warn({ err: (err as Error).message, task_id: ids.taskId, run_id: runId }, 'a2a: cannot read the run the server stopped following; its task shows it as last published until read')
      return
    }
    this.stats.reads++
    for (const u of runToUpdates(run, ids)) bus.publish(toBusEvent(u))
  }

  /** The task went from the store. */
  forget (taskId: string): void {
    this.last.delete(taskId)
  }

  private async read (task: Task): Promise<boolean> {
    const runId = runIdOf(task) as string
    let run: Run
    try {
      if (byVerdict(task) && await this.verdictStands(runId)) {
        this.stats.verdictChecks++
        return false
      }
      run = await this.current(runId)
    } catch (err) {
      this.stats.readErrors++
      this.host.log.warn({ err: (err as Error).message, task_id: task.id, run_id: runId }, 'a2a: cannot read the run of a task nothing follows; the task is shown as saved')
      return false
    }
    this.stats.reads++
    const ended = run.handoff_to === null && (run.state === 'completed' || run.state === 'failed')
    // a run still failed by a verdict stays due (at the interval): the executor may yet show it completed
    if (ended && run.failure?.code !== EXECUTOR_LOST) this.last.delete(task.id)
    // unchanged, or something took the run on while it was read (an A2A resume): that keeps the task
    if (taskShowsRun(task, run) || this.host.followed(task.id) || this.host.stopping.aborted) return false
    // the task as stored now: gone (evicted), ended, or moved on while the run was read: what was read is older
    const now = await this.host.store.load(task.id, CONTEXT)
    if (now === undefined || (now.status !== undefined && isFinalState(now.status.state) && !byVerdict(now)) || now.status?.timestamp !== task.status?.timestamp) {
      this.stats.raced++
      return false
    }
    try {
      if (byVerdict(now)) {
        // the verdict overturned: the SDK takes no status update on a final task, so the task is written whole
        // as its run now stands (the SDK keeps its history, and the bus went with the verdict)
        await new ResultManager(this.host.store, CONTEXT).processEvent(Bus.task({ ...runToTask(run, task.id), contextId: task.contextId }))
      } else await saveToTask(this.host, task.id, runToUpdates(run, { taskId: task.id, contextId: task.contextId }), ended)
    } catch (err) {
      this.stats.saveErrors++
      this.host.log.warn({ err: (err as Error).message, task_id: task.id, run_id: run.run_id }, 'a2a: cannot save the run read for a task nothing follows')
      return false
    }
    this.stats.updated++
    return true
  }

  /**
   * The delegator's own record of the run still shows the verdict: nothing
   * the executor said since has replaced it (liveness writes that record), so
   * asking the executor again would tell nothing new.
   */
  private async verdictStands (runId: string): Promise<boolean> {
    const own = await this.host.node.runs.store.getOutgoing(runId)
    return own === undefined || (own.state === 'failed' && own.failure?.code === EXECUTOR_LOST)
  }

  /** The run as its executor holds it now, through the handoffs made since (at most A2A_TASK_REFRESH_HANDOFFS_MAX). */
  private async current (runId: string): Promise<Run> {
    const deadline = Date.now() + A2A_TASK_REFRESH_TIMEOUT_MS
    const signal = AbortSignal.any([this.host.stopping, AbortSignal.timeout(A2A_TASK_REFRESH_TIMEOUT_MS)])
    const get = async (id: string): Promise<Run> => await this.host.node.getRun(id, { signal, callTimeoutMs: Math.max(1, deadline - Date.now()) })
    let run = await get(runId)
    for (let hops = 0; run.handoff_to !== null && hops < A2A_TASK_REFRESH_HANDOFFS_MAX; hops++) run = await get(run.handoff_to.run_id)
    return run
  }
}

/**
 * A task FAILED by its delegator's liveness verdict (EXECUTOR_LOST): the
 * executor, only cut off, may have ended the run otherwise, and its events
 * then replace the verdict in the delegator's record (the watch closed at
 * the verdict, so only a read of the run shows it).
 */
function byVerdict (task: Pick<Task, 'status'>): boolean {
  if (task.status?.state !== TaskState.TASK_STATE_FAILED) return false
  return typedData(task.status.message?.parts ?? [], PART_FAILURE)?.code === EXECUTOR_LOST
}
