/**
 * Durable run store. A run record and the event that records its transition
 * are written in one datastore batch, so the state and the log never
 * disagree, and nothing is acknowledged before the batch is committed.
 *
 * Writes are group-committed (`groupCommitting`): an idle store writes at once
 * (no added latency); a batch committed while another is being written joins
 * the next one, which starts as soon as the current one ends. Each commit
 * resolves only once the batch that holds it is written. Every datastore write costs a hop to the libuv
 * thread pool with LevelDB, which on a small machine costs more than the
 * write itself; so a busy node turns many small writes into a few larger
 * ones. The node hands the same group-committing datastore to the events
 * service, so its copies of other nodes' events share those batches.
 */
import { Key, type Batch, type Datastore } from 'interface-datastore'
import { IDEMPOTENCY_TTL_MS, OUTGOING_RUN_CACHE_MAX_ENTRIES } from '../constants.ts'
import { EventLog } from '../events/log.ts'
import type { AgentEvent, Run } from './types.ts'

const enc = new TextEncoder()
const dec = new TextDecoder()

const runKey = (runId: string): Key => new Key(`/aap/runs/${encodeURIComponent(runId)}`)
const outgoingKey = (runId: string): Key => new Key(`/aap/outgoing/${encodeURIComponent(runId)}`)
const idemKey = (delegator: string, key: string): Key => new Key(`/aap/idem/${encodeURIComponent(delegator)}/${encodeURIComponent(key)}`)

interface IdemRecord { run_id: string, at: number }

/** One put (with a value) or delete (without), in the order the batch was given them. */
type Op = [Key, Uint8Array | undefined]

interface Waiting { ops: Op[], resolve: () => void, reject: (err: unknown) => void }

class GroupWriter {
  private readonly ds: Datastore
  private queue: Waiting[] = []
  private busy = false

  constructor (ds: Datastore) {
    this.ds = ds
  }

  async write (ops: Op[]): Promise<void> {
    if (ops.length === 0) return
    const { promise, resolve, reject } = Promise.withResolvers<void>()
    this.queue.push({ ops, resolve, reject })
    this.flush()
    return promise
  }

  private flush (): void {
    if (this.busy || this.queue.length === 0) return
    const group = this.queue
    this.queue = []
    this.busy = true
    let committed: Promise<void>
    try {
      const batch = this.ds.batch()
      for (const w of group) {
        for (const [k, v] of w.ops) {
          if (v === undefined) batch.delete(k)
          else batch.put(k, v)
        }
      }
      committed = Promise.resolve(batch.commit())
    } catch (err) {
      committed = Promise.reject(err)
    }
    committed.then(
      () => { for (const w of group) w.resolve() },
      (err: unknown) => { for (const w of group) w.reject(err) }
    ).finally(() => {
      this.busy = false
      this.flush()
    })
  }
}

/** A batch whose commit joins its datastore's group writer. */
class GroupBatch implements Batch {
  private readonly writer: GroupWriter
  private ops: Op[] = []

  constructor (writer: GroupWriter) {
    this.writer = writer
  }

  put (key: Key, value: Uint8Array): void { this.ops.push([key, value]) }
  delete (key: Key): void { this.ops.push([key, undefined]) }
  async commit (): Promise<void> {
    const ops = this.ops
    this.ops = []
    await this.writer.write(ops)
  }
}

const groupCommitters = new WeakMap<Datastore, Datastore>()
const isGroupCommitting = new WeakSet<Datastore>()

/**
 * The datastore with group-committed batches (see above); reads and the other
 * writes go straight through. One per datastore, so everything that writes
 * through it shares the groups.
 */
export function groupCommitting<D extends Datastore> (ds: D): D {
  if (isGroupCommitting.has(ds)) return ds
  const known = groupCommitters.get(ds)
  if (known !== undefined) return known as D
  const writer = new GroupWriter(ds)
  const bound = new Map<PropertyKey, unknown>()
  const wrapped = new Proxy(ds, {
    get (target, prop) {
      if (prop === 'batch') return () => new GroupBatch(writer)
      const v: unknown = Reflect.get(target, prop, target)
      if (typeof v !== 'function') return v
      let b = bound.get(prop)
      if (b === undefined) {
        b = (v as (...args: unknown[]) => unknown).bind(target)
        bound.set(prop, b)
      }
      return b
    }
  })
  groupCommitters.set(ds, wrapped)
  isGroupCommitting.add(wrapped)
  return wrapped
}

export class RunStore {
  private readonly ds: Datastore
  readonly log: EventLog
  /**
   * The last outgoing records written, newest last: a delegated run's state
   * change (noteOutgoing) compares with its predecessor without reading it
   * back. Bounded; a miss reads the datastore.
   */
  private readonly outgoing = new Map<string, Run>()
  /** Outgoing records handed to the writer and not yet committed (read back from here meanwhile). */
  private readonly unsaved = new Map<string, { run: Run, write: Promise<void> }>()

  constructor (datastore: Datastore) {
    this.ds = groupCommitting(datastore)
    this.log = new EventLog(this.ds)
  }

  /** Write a run's new state and its event atomically (plus an idempotency record for a new run). */
  async commit (run: Run, event: AgentEvent, idempotency?: { delegator: string, key: string }): Promise<void> {
    const batch = this.ds.batch()
    batch.put(runKey(run.run_id), enc.encode(JSON.stringify(run)))
    EventLog.put(batch, event)
    if (idempotency !== undefined) {
      const rec: IdemRecord = { run_id: run.run_id, at: Date.now() }
      batch.put(idemKey(idempotency.delegator, idempotency.key), enc.encode(JSON.stringify(rec)))
    }
    await batch.commit()
  }

  async get (runId: string): Promise<Run | undefined> {
    try {
      return JSON.parse(dec.decode(await this.ds.get(runKey(runId)))) as Run
    } catch {
      return undefined
    }
  }

  /** Every run this node executes (for restart recovery and listing). */
  async * all (): AsyncGenerator<Run> {
    for await (const { value } of this.ds.query({ prefix: '/aap/runs' })) {
      yield JSON.parse(dec.decode(value)) as Run
    }
  }

  async idempotent (delegator: string, key: string): Promise<string | undefined> {
    try {
      const rec = JSON.parse(dec.decode(await this.ds.get(idemKey(delegator, key)))) as IdemRecord
      return Date.now() - rec.at < IDEMPOTENCY_TTL_MS ? rec.run_id : undefined
    } catch {
      return undefined
    }
  }

  /**
   * The delegator's own record of a run it started elsewhere (its last known
   * state). Readable here (getOutgoing, allOutgoing) at once; the returned
   * promise resolves once it is durable. This is the delegator's index, not
   * the run: the run and its run.started event are durable at the executor
   * before the handle exists, and the run id names the executor, so a record
   * lost to a crash of the delegator leaves the run reachable (getRun,
   * replay). `flushOutgoing` waits for every write handed over so far.
   */
  async putOutgoing (run: Run): Promise<void> {
    this.outgoing.delete(run.run_id)
    if (this.outgoing.size >= OUTGOING_RUN_CACHE_MAX_ENTRIES) {
      const oldest = this.outgoing.keys().next()
      if (oldest.done !== true) this.outgoing.delete(oldest.value)
    }
    this.outgoing.set(run.run_id, run)
    const batch = this.ds.batch()
    batch.put(outgoingKey(run.run_id), enc.encode(JSON.stringify(run)))
    const write = Promise.resolve(batch.commit())
    const entry = { run, write }
    this.unsaved.set(run.run_id, entry)
    try {
      await write
    } finally {
      if (this.unsaved.get(run.run_id) === entry) this.unsaved.delete(run.run_id)
    }
  }

  /** Resolves once every outgoing record handed over so far is committed (or failed). */
  async flushOutgoing (): Promise<void> {
    await Promise.allSettled([...this.unsaved.values()].map(async u => u.write))
  }

  async getOutgoing (runId: string): Promise<Run | undefined> {
    const cached = this.unsaved.get(runId)?.run ?? this.outgoing.get(runId)
    if (cached !== undefined) return cached
    try {
      return JSON.parse(dec.decode(await this.ds.get(outgoingKey(runId)))) as Run
    } catch {
      return undefined
    }
  }

  async * allOutgoing (): AsyncGenerator<Run> {
    const unsaved = new Map([...this.unsaved].map(([id, u]) => [id, u.run]))
    for await (const { value } of this.ds.query({ prefix: '/aap/outgoing' })) {
      const stored = JSON.parse(dec.decode(value)) as Run
      const newer = unsaved.get(stored.run_id)
      unsaved.delete(stored.run_id)
      yield newer ?? stored
    }
    // records still on their way to the datastore
    yield * unsaved.values()
  }
}
