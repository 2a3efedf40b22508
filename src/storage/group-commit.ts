/**
 * Group commit: the node's one write batcher. Every datastore write costs a
 * hop to the libuv thread pool with LevelDB, which on a small machine costs
 * more than the write itself, so a busy node turns many small batches into a
 * few larger ones.
 *
 * - A write on an idle committer goes out at once (no added latency).
 * - Writes handed over while a batch is being written join the next batch,
 *   which starts as soon as the current one ends.
 * - A write may `linger` up to some milliseconds for company (copies of
 *   gossiped events do): it goes out with the next write that does not
 *   linger, when its time is up, when `lingerMaxOps` operations wait, or on
 *   `flush()`.
 * - A lingering write that would make more than STORAGE_QUEUE_MAX_BYTES
 *   wait sends what waits to the disk if no batch is being written, and is
 *   refused at once (StorageFullError, reason queue_full) if one is: those
 *   are copies that can be fetched again, and a stalled disk had them queue
 *   in memory without a bound. Writes that do not linger are never refused.
 *
 * Batches are written one at a time in the order their writes were handed
 * over, so a later write never lands before an earlier one, and hold at most
 * STORAGE_BATCH_MAX_OPS operations (a larger single write goes alone). Each
 * write resolves only once the batch that holds it is committed.
 */
import type { Batch, Datastore, Key } from 'interface-datastore'
import { STORAGE_LINGER_MAX_OPS } from '../constants.ts'
import { StorageFullError } from '../errors.ts'
import { STORAGE_BATCH_MAX_OPS, STORAGE_QUEUE_MAX_BYTES } from './constants.ts'

/** One put (with a value) or delete (without), in the order they were given. */
export type WriteOp = [Key, Uint8Array | undefined]

export interface WriteOptions {
  /** Wait at most this long for other writes to share the batch; refused past STORAGE_QUEUE_MAX_BYTES (see above). */
  lingerMs?: number
}

interface Waiting { ops: WriteOp[], bytes: number, resolve: () => void, reject: (err: unknown) => void }

/** Whether `err` is a lingering write refused because STORAGE_QUEUE_MAX_BYTES waited (see GroupCommitter.write). */
export function queueFull (err: unknown): boolean {
  return err instanceof StorageFullError && err.details?.reason === 'queue_full'
}

export class GroupCommitter {
  private readonly ds: Datastore
  private queue: Waiting[] = []
  private queuedOps = 0
  private waitingBytes = 0
  private busy = false
  private current: Promise<void> = Promise.resolve()
  private lingerTimer: ReturnType<typeof setTimeout> | undefined
  /** Batches committed so far (durability.ts syncs the log when this moved). */
  committed = 0
  /** Lingering writes refused because STORAGE_QUEUE_MAX_BYTES waited (each rejected with queue_full). */
  refused = 0

  constructor (ds: Datastore) {
    this.ds = ds
  }

  /** Bytes of the writes waiting for a batch (not those of the batch being written). */
  get queuedBytes (): number {
    return this.waitingBytes
  }

  async write (ops: WriteOp[], opts: WriteOptions = {}): Promise<void> {
    if (ops.length === 0) return
    const lingers = opts.lingerMs !== undefined && opts.lingerMs > 0
    const bytes = sizeOf(ops)
    // a lingering write alone in the queue goes whatever its size, or it could never go
    const full = (): boolean => this.waitingBytes > 0 && this.waitingBytes + bytes > STORAGE_QUEUE_MAX_BYTES
    // a burst that fills the queue within one linger goes to a free disk now; refused only behind a batch being written
    if (lingers && full() && !this.busy) this.start()
    if (lingers && full()) {
      this.refused++
      throw new StorageFullError('the datastore is not keeping up: a write that can be made again later was refused', {
        store: 'datastore', reason: 'queue_full', queued_bytes: this.waitingBytes, max_bytes: STORAGE_QUEUE_MAX_BYTES
      })
    }
    const { promise, resolve, reject } = Promise.withResolvers<void>()
    this.queue.push({ ops, bytes, resolve, reject })
    this.queuedOps += ops.length
    this.waitingBytes += bytes
    if (!lingers || this.queuedOps >= STORAGE_LINGER_MAX_OPS) {
      this.start()
    } else if (this.lingerTimer === undefined && !this.busy) {
      this.lingerTimer = setTimeout(() => { this.start() }, opts.lingerMs)
      this.lingerTimer.unref?.()
    }
    return promise
  }

  /** Write everything handed over so far now; resolves once it is committed (rejects if a batch failed). */
  async flush (): Promise<void> {
    const last = this.queue.at(-1)
    this.start()
    const inFlight = this.current
    if (last === undefined) {
      await inFlight
      return
    }
    await Promise.all([inFlight, new Promise<void>((resolve, reject) => {
      const { resolve: r, reject: j } = last
      last.resolve = () => { r(); resolve() }
      last.reject = (err) => { j(err); reject(err) }
    })])
  }

  private start (): void {
    clearTimeout(this.lingerTimer)
    this.lingerTimer = undefined
    if (this.busy || this.queue.length === 0) return
    // the oldest writes, up to the batch bound (at least one write, whole); the rest go in the next batch
    let take = 0
    let ops = 0
    let bytes = 0
    while (take < this.queue.length && (take === 0 || ops + (this.queue[take] as Waiting).ops.length <= STORAGE_BATCH_MAX_OPS)) {
      ops += (this.queue[take] as Waiting).ops.length
      bytes += (this.queue[take] as Waiting).bytes
      take++
    }
    const group = take === this.queue.length ? this.queue : this.queue.slice(0, take)
    this.queue = take === this.queue.length ? [] : this.queue.slice(take)
    this.queuedOps -= ops
    this.waitingBytes -= bytes
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
    const done = committed.then(
      () => {
        this.committed++
        for (const w of group) w.resolve()
      },
      (err: unknown) => { for (const w of group) w.reject(err) }
    )
    // `current` never rejects: failures reach the writers of the batch, each on its own promise
    this.current = done.finally(() => {
      this.busy = false
      this.start()
    })
  }
}

/** What a write holds in memory: its keys and values. */
function sizeOf (ops: WriteOp[]): number {
  let n = 0
  for (const [k, v] of ops) n += k.uint8Array().byteLength + (v?.byteLength ?? 0)
  return n
}

/** A batch whose commit joins its datastore's group committer. */
class GroupBatch implements Batch {
  private readonly committer: GroupCommitter
  private ops: WriteOp[] = []

  constructor (committer: GroupCommitter) {
    this.committer = committer
  }

  put (key: Key, value: Uint8Array): void { this.ops.push([key, value]) }
  delete (key: Key): void { this.ops.push([key, undefined]) }
  async commit (): Promise<void> {
    const ops = this.ops
    this.ops = []
    await this.committer.write(ops)
  }
}

const committers = new WeakMap<Datastore, GroupCommitter>()
const wrappers = new WeakMap<Datastore, Datastore>()
const isWrapper = new WeakSet<Datastore>()

/** The group committer of a datastore: one per datastore, so everything that writes to it shares the batches. */
export function groupCommitter (ds: Datastore): GroupCommitter {
  let c = committers.get(ds)
  if (c === undefined) {
    c = new GroupCommitter(ds)
    committers.set(ds, c)
  }
  return c
}

/**
 * The datastore with its batches group-committed (see above); reads and the
 * other writes go straight through. One per datastore; wrapping a wrapper
 * returns it.
 */
export function groupCommitting<D extends Datastore> (ds: D): D {
  if (isWrapper.has(ds)) return ds
  const known = wrappers.get(ds)
  if (known !== undefined) return known as D
  const committer = groupCommitter(ds)
  const bound = new Map<PropertyKey, unknown>()
  const wrapped = new Proxy(ds, {
    get (target, prop) {
      if (prop === 'batch') return () => new GroupBatch(committer)
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
  wrappers.set(ds, wrapped)
  committers.set(wrapped, committer)
  isWrapper.add(wrapped)
  return wrapped
}
