/**
 * The inbound server's tasks kept across restarts: one record per task of
 * each agent it serves, in a datastore of its own (a LevelDB in
 * A2A_TASK_RECORDS_DIR of the node's data directory). The mesh run behind a
 * task is durable in the node's run log, but the A2A task id the client
 * polls is the SDK's, and only these records name it, with the history and
 * artifacts the client saw.
 *
 * A task store hands each save and drop here (`mark`); the records are
 * written behind, in batches, the latest state of each task only, so the
 * SDK's many saves of one task in a turn cost one write. A record is deleted
 * when its task is dropped, so the records are bounded as the tasks held
 * are. Loading an agent's tasks reads its records, bounded by a multiple of
 * the store's bounds (A2A_TASK_RECORDS_LOAD_FACTOR), in the order they were
 * written; a record that cannot be read (damaged, another version's, another
 * task's) is skipped, counted and logged, never fatal.
 */
import { join } from 'node:path'
import { mkdir } from 'node:fs/promises'
import { Task, TaskState } from '@a2a-js/sdk'
import { LevelDatastore } from 'datastore-level'
import { Key, type Datastore } from 'interface-datastore'
import { InvalidRequestError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { guardWrites } from '../storage/write-guard.ts'
import { A2A_TASK_RECORD_VERSION, A2A_TASK_RECORDS_DIR, A2A_TASK_RECORDS_LOAD_FACTOR } from './constants.ts'

const PREFIX = '/a2a/tasks'

/** What was written, refused, read and skipped, all agents together. */
export interface TaskRecordStats {
  /** Records written or deleted. */
  written: number
  /** Batches the datastore refused (their tasks keep their last record until saved again). */
  writeErrors: number
  /** Tasks loaded from records. */
  loaded: number
  /** Records not loaded: damaged, another version's, past the load bound. */
  skipped: number
  /** Loads the datastore failed part way (the tasks read until then are kept). */
  loadErrors: number
}

export class TaskRecords {
  readonly stats: TaskRecordStats = { written: 0, writeErrors: 0, loaded: 0, skipped: 0, loadErrors: 0 }
  readonly ds: Datastore
  readonly log: Logger
  private readonly owned: (Datastore & { close?: () => Promise<void> }) | undefined
  /** Writes under way, by agent: a store made again for an agent loads only once its predecessor's writes are in. */
  private readonly writing = new Map<string, Promise<void>>()
  private closed = false

  constructor (ds: Datastore, log: Logger, owned = false) {
    this.ds = ds
    this.log = log
    this.owned = owned ? ds : undefined
  }

  /** The records in the LevelDB of `dataDir`'s A2A_TASK_RECORDS_DIR (made when missing); closed with close(). */
  static async open (dataDir: string, log: Logger): Promise<TaskRecords> {
    const path = join(dataDir, A2A_TASK_RECORDS_DIR)
    await mkdir(path, { recursive: true, mode: 0o700 })
    const ds = new LevelDatastore(path)
    await ds.open()
    // a write the disk refused leaves the LevelDB to be opened again before the next (write-guard.ts): written on
    // after a torn log record, the records written since would be gone at the next start
    return new TaskRecords(guardWrites(ds), log, true)
  }

  /** The records of one agent's tasks. */
  forAgent (agentId: string): AgentTaskRecords {
    return new AgentTaskRecords(this, agentId)
  }

  /** Whether the records take writes still (not once closed). */
  get open (): boolean {
    return !this.closed
  }

  /** An agent's writes under way, until they are over (a load of its tasks waits for them). */
  track (agentId: string, writes: Promise<void>): void {
    this.writing.set(agentId, writes)
    void writes.finally(() => { if (this.writing.get(agentId) === writes) this.writing.delete(agentId) })
  }

  async settled (agentId: string): Promise<void> {
    await this.writing.get(agentId)
  }

  /** Every write under way in, then the datastore closed if it is this server's own. */
  async close (): Promise<void> {
    if (this.closed) return
    while (this.writing.size > 0) await Promise.all([...this.writing.values()])
    this.closed = true
    await this.owned?.close?.()
  }
}

interface Pending {
  /** The task as last saved; undefined: it was dropped (its record goes). */
  task: Task | undefined
  seq: number
}

/** A task record as stored. */
interface RecordShape {
  v: number
  /** The order the records were written in: a store loads them in it, least recently written first. */
  seq: number
  task: unknown
}

export class AgentTaskRecords {
  private readonly parent: TaskRecords
  private readonly agentId: string
  private readonly dirty = new Map<string, Pending>()
  private seq = 0
  private flushing: Promise<void> | undefined

  constructor (parent: TaskRecords, agentId: string) {
    this.parent = parent
    this.agentId = agentId
  }

  private key (taskId: string): Key {
    return new Key(`${PREFIX}/${this.agentId}/${encodeURIComponent(taskId)}`)
  }

  /** The task was saved (`task`) or dropped (undefined): its record is written behind. */
  mark (taskId: string, task: Task | undefined): void {
    if (!this.parent.open) return
    // the newest write goes last, so the order of the batch is the order of the writes
    this.dirty.delete(taskId)
    this.dirty.set(taskId, { task, seq: ++this.seq })
    if (this.flushing === undefined) {
      this.flushing = this.write().finally(() => { this.flushing = undefined })
      this.parent.track(this.agentId, this.flushing)
    }
  }

  /** Resolves when every record marked so far is written (or its write failed, counted and logged). */
  async flush (): Promise<void> {
    while (this.flushing !== undefined) await this.flushing
  }

  private async write (): Promise<void> {
    // one turn later: the saves of this turn go in the same batch
    await Promise.resolve()
    while (this.dirty.size > 0) {
      const taken = [...this.dirty]
      this.dirty.clear()
      try {
        const batch = this.parent.ds.batch()
        for (const [id, p] of taken) {
          if (p.task === undefined) batch.delete(this.key(id))
          else batch.put(this.key(id), encode(p.task, p.seq))
        }
        await batch.commit()
        this.parent.stats.written += taken.length
      } catch (err) {
        this.parent.stats.writeErrors++
        this.parent.log.warn({ err: (err as Error).message, agent_id: this.agentId, records: taken.length }, 'a2a: task records could not be written; those tasks keep their last record until they are saved again')
      }
    }
  }

  /**
   * The agent's tasks as last written, least recently written first: at most
   * A2A_TASK_RECORDS_LOAD_FACTOR times `maxTasks` records and `maxBytes` bytes
   * are read. Never throws: what cannot be read is skipped (logged).
   */
  async load (maxTasks: number, maxBytes: number): Promise<Task[]> {
    await this.parent.settled(this.agentId)
    const read: Array<{ seq: number, task: Task }> = []
    const stats = this.parent.stats
    let records = 0
    let bytes = 0
    try {
      for await (const { key, value } of this.parent.ds.query({ prefix: `${PREFIX}/${this.agentId}/` })) {
        records++
        bytes += value.byteLength
        if (records > maxTasks * A2A_TASK_RECORDS_LOAD_FACTOR || bytes > maxBytes * A2A_TASK_RECORDS_LOAD_FACTOR) {
          stats.skipped++
          this.parent.log.warn({ agent_id: this.agentId, records, bytes, max_tasks: maxTasks, max_bytes: maxBytes }, 'a2a: more task records than the agent\'s bounds allow; the rest are not loaded')
          break
        }
        try {
          if (value.byteLength > maxBytes) throw new InvalidRequestError(`a task record of ${value.byteLength} bytes, past the agent's ${maxBytes}`, { reason: 'task_record_too_large' })
          read.push(decode(key, value))
        } catch (err) {
          stats.skipped++
          this.parent.log.warn({ err: (err as Error).message, key: key.toString().slice(0, 256) }, 'a2a: a task record that cannot be read is skipped')
        }
      }
    } catch (err) {
      stats.loadErrors++
      this.parent.log.warn({ err: (err as Error).message, agent_id: this.agentId, read: read.length }, 'a2a: the agent\'s task records could not all be read; the tasks read are kept')
    }
    read.sort((a, b) => a.seq - b.seq)
    this.seq = Math.max(this.seq, read.at(-1)?.seq ?? 0)
    stats.loaded += read.length
    return read.map(r => r.task)
  }
}

function encode (task: Task, seq: number): Uint8Array {
  const shape: RecordShape = { v: A2A_TASK_RECORD_VERSION, seq, task: Task.toJSON(task) }
  return new TextEncoder().encode(JSON.stringify(shape))
}

/** A record as its task; a typed error (INVALID_REQUEST, reason bad_task_record) when it is not one this server wrote for this key. */
function decode (key: Key, value: Uint8Array): { seq: number, task: Task } {
  const bad = (why: string): InvalidRequestError => new InvalidRequestError(`not a task record: ${why}`, { reason: 'bad_task_record' })
  let shape: Partial<RecordShape>
  try {
    shape = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(value)) as Partial<RecordShape>
  } catch (err) {
    throw bad(`unreadable (${(err as Error).message.slice(0, 120)})`)
  }
  if (typeof shape !== 'object' || shape === null || Array.isArray(shape)) throw bad('not an object')
  if (shape.v !== A2A_TASK_RECORD_VERSION) throw bad(`version ${String(shape.v).slice(0, 20)}, not ${A2A_TASK_RECORD_VERSION}`)
  if (typeof shape.seq !== 'number' || !Number.isSafeInteger(shape.seq) || shape.seq < 0) throw bad('no write order')
  if (typeof shape.task !== 'object' || shape.task === null || Array.isArray(shape.task)) throw bad('no task')
  let task: Task
  try {
    task = Task.fromJSON(shape.task)
  } catch (err) {
    throw bad(`a task that cannot be read (${(err as Error).message.slice(0, 120)})`)
  }
  let named: string
  try {
    named = decodeURIComponent(key.baseNamespace())
  } catch {
    throw bad('a key that names no task')
  }
  if (task.id === '' || task.id !== named) throw bad('the task is not the one its key names')
  if (task.contextId === '') throw bad('the task has no context')
  const state = task.status?.state
  if (state === undefined || state === TaskState.TASK_STATE_UNSPECIFIED || TaskState[state] === undefined) throw bad('the task has no known state')
  return { seq: shape.seq, task }
}
