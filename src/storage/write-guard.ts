/**
 * The node's datastore with its write failures typed. A disk that is full or
 * failing makes LevelDB throw plain errors from put, delete and batch commits;
 * through this view they become STORAGE_FULL (`details.store: datastore`,
 * `details.reason: no_space | write_failed`), so a caller (a delegator on the
 * wire, the local API) hears why its request was refused instead of INTERNAL,
 * and nothing of the refused write was kept (a batch is all or nothing).
 *
 * The view remembers whether the last write failed (`health`): a node whose
 * store is failing refuses new runs up front, and `probe()` tries one small
 * write to learn whether the fault has cleared. Reads pass straight through,
 * but for a store closed for good (the node stopped): they fail as its writes
 * do then, INTERNAL with `details.reason: closed` (guarded-reads.ts).
 *
 * A LevelDB store is not written again after a refused write until it has
 * been closed and opened (reopen.ts: what LevelDB wrote after a torn log
 * record is lost at the next open). The next write (a probe, a retry) opens
 * it again, at most once per STORAGE_REOPEN_INTERVAL_MS (writes meanwhile wait
 * for that try), and reads wait for a reopen in flight.
 */
import type { Batch, Datastore, Key, Pair } from 'interface-datastore'
import { Key as DsKey } from 'interface-datastore'
import { AapError, StorageFullError } from '../errors.ts'
import { readsOf } from './guarded-reads.ts'
import { levelReopener, type Reopener } from './reopen.ts'

/** The datastore's own option types, passed through unchanged. */
type PutOptions = Parameters<Datastore['put']>[2]
type DeleteOptions = Parameters<Datastore['delete']>[1]
type PutManyOptions = Parameters<Datastore['putMany']>[1]
type DeleteManyOptions = Parameters<Datastore['deleteMany']>[1]

/** Where probe() writes (one small value, overwritten each time). */
const PROBE_KEY = new DsKey('/aap/storage/probe')

export interface StorageHealth {
  /** Set while the last write failed: when the failing began and why. */
  failing?: { since: number, reason: 'no_space' | 'write_failed', message: string }
  /** Writes refused since the node started. */
  refusedWrites: number
  /** Set once the store was closed (the node stops): later writes fail as `closed`, not as a failing disk. */
  closed?: boolean
  /** Times the store was opened again after a refused write, and tries that failed (the writer that asked got why). */
  reopens: number
  reopenFailures: number
}

export interface GuardedDatastore extends Datastore {
  readonly health: StorageHealth
  /** One small write: resolves when the store takes writes again, throws STORAGE_FULL while it does not. */
  probe: () => Promise<void>
  /** Run a write made on the store beneath the datastore (durability.ts's synced put) as the guard's writes go. */
  guarded: <T>(fn: () => Promise<T>) => Promise<T>
  /** Set while the store is opened again or left closed by a failed open: read.ts reads through the datastore then. */
  readonly reopening: boolean
  /** The LevelDB's reopener, if any (range.ts goes on with a read a reopen's close cut short). */
  readonly reopener: Reopener | undefined
  /** What a read waits for first (undefined: nothing): a reopen under way, or the open a failed one left to do. */
  readonly readReady: () => Promise<void> | undefined
}

function isNoSpace (err: unknown): boolean {
  const e = err as { code?: unknown, message?: unknown } | undefined
  return e?.code === 'ENOSPC' || (typeof e?.message === 'string' && /no space left|ENOSPC|disk full/i.test(e.message))
}

/** The typed error of a failed write to `store` (an AapError passes through unchanged). */
export function storageWriteError (err: unknown, store: 'datastore' | 'artifacts' = 'datastore'): AapError {
  if (err instanceof AapError) return err
  const reason = isNoSpace(err) ? 'no_space' : 'write_failed'
  // the store's own message (it may name files of the data dir) stays in `cause`, off the wire
  const what = store === 'datastore' ? 'datastore' : 'artifact store'
  const e = new StorageFullError(`the node's ${what} refused a write (${reason === 'no_space' ? 'out of space' : 'write failed'})`, { store, reason })
  e.cause = err
  return e
}

/** A write (or a read) made after the store was closed: nothing was kept, and no disk is at fault. */
export function closedStoreError (err: unknown): AapError {
  const e = new AapError('INTERNAL', 'the node\'s datastore is closed (the node stopped)', { store: 'datastore', reason: 'closed' })
  e.cause = err
  return e
}

/** A write or read that failed only because the store had been closed (see closedStoreError). */
export function refusedAsClosed (err: unknown): boolean {
  return err instanceof AapError && err.code === 'INTERNAL' && err.details?.reason === 'closed'
}

/** The store refused a write (a full or failing disk): the same write may be tried again later. */
export function refusedByStore (err: unknown): boolean {
  return err instanceof AapError && err.code === 'STORAGE_FULL'
}

const guarded = new WeakSet<Datastore>()

/** How often a store has taken a write again after refusing one, and who waits for the next time. */
interface Recovery { count: number, waiting: Set<() => void> }
/** Each refusal (STORAGE_FULL) a guarded store threw, with its store's recoveries as they stood then. */
const refusedAt = new WeakMap<object, { recovery: Recovery, count: number }>()

/**
 * Resolves once the store that refused `err` has taken a write again since
 * (at once when it already has), or when `signal` aborts; undefined for an
 * error no guarded store threw. A writer that retries after a refusal
 * (end-retry.ts) waits on this as well as on its timer, so its retry lands
 * as soon as the fault clears instead of up to a whole retry interval later.
 */
export function storeRecovered (err: unknown, signal: AbortSignal): Promise<void> | undefined {
  const at = typeof err === 'object' && err !== null ? refusedAt.get(err) : undefined
  if (at === undefined) return undefined
  if (at.recovery.count > at.count || signal.aborted) return Promise.resolve()
  const { promise, resolve } = Promise.withResolvers<void>()
  const waiting = at.recovery.waiting
  const wake = (): void => {
    waiting.delete(wake)
    signal.removeEventListener('abort', wake)
    resolve()
  }
  waiting.add(wake)
  signal.addEventListener('abort', wake, { once: true })
  return promise
}

/** Settles when `p` does, either way: what a reopen failed of is the writer's to hear (reads just wait it out). */
async function settled (p: Promise<void>): Promise<void> {
  await p.then(() => undefined, () => undefined)
}

/** A store a failed open left closed is opened (ensure) before a read; why not, typed. */
async function openForRead (reopen: Reopener): Promise<void> {
  try {
    await reopen.ensure()
  } catch (err) {
    throw storageWriteError(err)
  }
}

/** Options without their signal (see `put`). */
function withoutSignal<O extends { signal?: AbortSignal }> (o: O | undefined): O | undefined {
  return o?.signal === undefined ? o : { ...o, signal: undefined }
}

/** Wrap `ds` (once: a guarded store is returned as it is); `reopen` defaults to the LevelDB's under `ds`, if any. */
export function guardWrites (ds: Datastore, reopen: Reopener | undefined = levelReopener(ds)): GuardedDatastore {
  if (guarded.has(ds)) return ds as GuardedDatastore
  const health: StorageHealth = { refusedWrites: 0, reopens: 0, reopenFailures: 0 }
  const recovery: Recovery = { count: 0, waiting: new Set() }
  const ok = (): void => {
    if (health.failing === undefined) return
    health.failing = undefined
    recovery.count++
    for (const wake of recovery.waiting) wake()
    recovery.waiting.clear()
  }
  const failed = (err: unknown): AapError => {
    // libp2p may still write a peer record while the node stops: that is no disk fault
    if (health.closed === true) return closedStoreError(err)
    const e = storageWriteError(err)
    if (e.code === 'STORAGE_FULL') {
      health.refusedWrites++
      const reason = e.details?.reason === 'no_space' ? 'no_space' : 'write_failed'
      health.failing = { since: health.failing?.since ?? Date.now(), reason, message: e.message }
      refusedAt.set(e, { recovery, count: recovery.count })
    }
    return e
  }
  const refuse = (err: unknown): AapError => {
    const e = failed(err)
    if (e.code === 'STORAGE_FULL') reopen?.markDue()
    return e
  }
  /** Open the store again if a refused write made that due (reopen.ts); a write goes only after. */
  const reopened = async (): Promise<void> => {
    if (reopen === undefined) return
    const started = reopen.pending === undefined && reopen.due
    try {
      await reopen.ensure()
    } catch (err) {
      if (started) health.reopenFailures++
      throw failed(err)
    }
    if (started) health.reopens++
  }
  const mustReopen = (): boolean => reopen !== undefined && (reopen.due || reopen.pending !== undefined)
  const write = async <T>(fn: () => Promise<T>): Promise<T> => {
    if (mustReopen()) await reopened()
    const refusals = reopen?.refusals
    let out: T
    try {
      out = await fn()
    } catch (err) {
      throw refuse(err)
    }
    // LevelDB writes what came while a write failed after it, past a torn record the reopen drops: such a write is
    // refused too, so its writer tries it again once the store is open again
    // (not counted as a refusal of its own: the store took it, and the one refused already made the reopen due)
    if (reopen !== undefined && reopen.refusals !== refusals) throw failed(new Error('written beside a write the store refused: the reopen may drop it'))
    ok()
    return out
  }
  /** What a read waits for: a close and open in flight, or the open a failed one left to do (typed if it fails). */
  const readable = (): Promise<void> | undefined => {
    if (reopen === undefined) return undefined
    const p = reopen.inFlight
    if (p !== undefined) return settled(p).then(async () => { if (!reopen.isOpen) await openForRead(reopen) })
    return reopen.isOpen || !reopen.due ? undefined : openForRead(reopen)
  }
  const closable = typeof (ds as { close?: unknown }).close === 'function'
  /** A read's error once the store was closed: the one its writes fail with. */
  const shut = (err: unknown): AapError | undefined => health.closed === true ? closedStoreError(err) : undefined
  const own: Record<PropertyKey, unknown> = {
    health,
    probe: async () => { await write(async () => ds.put(PROBE_KEY, new Uint8Array([1]))) },
    guarded: write,
    // a caller's abort is not let through to the write: the store would throw it as its own failure (datastore-level
    // races the signal), taken here for a failing disk, and the write may land all the same
    put: async (k: Key, v: Uint8Array, o?: PutOptions) => {
      o?.signal?.throwIfAborted()
      return write(async () => ds.put(k, v, withoutSignal(o)))
    },
    delete: async (k: Key, o?: DeleteOptions) => {
      o?.signal?.throwIfAborted()
      await write(async () => { await ds.delete(k, withoutSignal(o)) })
    },
    putMany: async function * (source: AsyncIterable<Pair> | Iterable<Pair>, o?: PutManyOptions) {
      if (mustReopen()) await reopened()
      try {
        yield * ds.putMany(source, withoutSignal(o))
      } catch (err) {
        throw refuse(err)
      }
      ok()
    },
    deleteMany: async function * (source: AsyncIterable<Key> | Iterable<Key>, o?: DeleteManyOptions) {
      if (mustReopen()) await reopened()
      try {
        yield * ds.deleteMany(source, withoutSignal(o))
      } catch (err) {
        throw refuse(err)
      }
      ok()
    },
    // reads wait for a reopen, and fail typed (as writes do) once the store was closed
    ...(reopen === undefined && !closable ? {} : readsOf(ds, { reopen, ready: readable, shut })),
    ...(closable
      ? {
          close: async () => {
            health.closed = true
            // a reopen that went on after this close would open the store again, and keep its lock, for good
            const pending = reopen?.shut()
            if (pending !== undefined) await settled(pending)
            await (ds as unknown as { close: () => Promise<void> }).close()
          }
        }
      : {}),
    batch: (): Batch => {
      const b = ds.batch()
      return {
        put: (k: Key, v: Uint8Array) => { b.put(k, v) },
        delete: (k: Key) => { b.delete(k) },
        commit: async () => { await write(async () => { await b.commit() }) }
      }
    }
  }
  const bound = new Map<PropertyKey, unknown>()
  const view = new Proxy(ds, {
    get (target, prop) {
      // read.ts and range.ts read the LevelDB itself only while it is open and no reopen is under way
      if (prop === 'reopening') return reopen !== undefined && (reopen.inFlight !== undefined || !reopen.isOpen)
      if (prop === 'reopener') return reopen
      if (prop === 'readReady') return readable
      if (Object.hasOwn(own, prop)) return own[prop]
      const v: unknown = Reflect.get(target, prop, target)
      if (typeof v !== 'function') return v
      let b = bound.get(prop)
      if (b === undefined) {
        b = (v as (...args: unknown[]) => unknown).bind(target)
        bound.set(prop, b)
      }
      return b
    }
  }) as GuardedDatastore
  guarded.add(view)
  return view
}
