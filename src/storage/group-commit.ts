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
 *
 * Batches are written one at a time in the order their writes were handed
 * over, so a later write never lands before an earlier one, and hold at most
 * STORAGE_BATCH_MAX_OPS operations (a larger single write goes alone). Each
 * write resolves only once the batch that holds it is committed.
 */
import type { Batch, Datastore, Key } from 'interface-datastore'
import { STORAGE_LINGER_MAX_OPS } from '../constants.ts'
import { STORAGE_BATCH_MAX_OPS } from './constants.ts'

/** One put (with a value) or delete (without), in the order they were given. */
export type WriteOp = [Key, Uint8Array | undefined]

export interface WriteOptions {
  /** Wait at most this long for other writes to share the batch. */
  lingerMs?: number
}

interface Waiting { ops: WriteOp[], resolve: () => void, reject: (err: unknown) => void }

export class GroupCommitter {
  private readonly ds: Datastore
  private queue: Waiting[] = []
  private queuedOps = 0
  private busy = false
  private current: Promise<void> = Promise.resolve()
  private lingerTimer: ReturnType<typeof setTimeout> | undefined
  /** Batches committed so far (durability.ts syncs the log when this moved). */
  committed = 0

  constructor (ds: Datastore) {
    this.ds = ds
  }

  async write (ops: WriteOp[], opts: WriteOptions = {}): Promise<void> {
    if (ops.length === 0) return
    const { promise, resolve, reject } = Promise.withResolvers<void>()
    this.queue.push({ ops, resolve, reject })
    this.queuedOps += ops.length
    if (opts.lingerMs === undefined || opts.lingerMs <= 0 || this.queuedOps >= STORAGE_LINGER_MAX_OPS) {
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
    while (take < this.queue.length && (take === 0 || ops + (this.queue[take] as Waiting).ops.length <= STORAGE_BATCH_MAX_OPS)) {
      ops += (this.queue[take] as Waiting).ops.length
      take++
    }
    const group = take === this.queue.length ? this.queue : this.queue.slice(0, take)
    this.queue = take === this.queue.length ? [] : this.queue.slice(take)
    this.queuedOps -= ops
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
