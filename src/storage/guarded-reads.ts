/**
 * Reads of a LevelDB store the write guard may close and open again
 * (write-guard.ts, reopen.ts). A read waits for a close and open in flight,
 * and for a store a failed open left closed it asks for the open first (a
 * typed STORAGE_FULL when that fails, not LevelDB's own error). A query the
 * close cut short goes on after the last key it gave, as range.ts does with
 * its own iterators. Once the store was closed for good (the node stopped),
 * every read fails with the error `shut` gives (write-guard.ts: the same
 * typed INTERNAL `closed` its writes fail with), not LevelDB's own.
 */
import type { Datastore, Key, Pair, Query, KeyQuery } from 'interface-datastore'
import { STORAGE_RANGE_REOPEN_RETRIES } from './constants.ts'
import type { Reopener } from './reopen.ts'

type ReadOptions = Parameters<Datastore['get']>[1]
type QueryOptions = Parameters<Datastore['query']>[1]
type GetManyOptions = Parameters<Datastore['getMany']>[1]

/** Whether `err` is LevelDB's refusal of an iterator its database closed, or of a closed database. */
export function closedUnderneath (err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code
  return code === 'LEVEL_ITERATOR_NOT_OPEN' || code === 'LEVEL_DATABASE_NOT_OPEN'
}

/**
 * Whether a read `closedUnderneath` that began at reopen generation `since`
 * may go on: a reopen started since, or is under way (anything else is a
 * store closed for good, or no reopen's doing).
 */
export function cutByReopen (reopen: Reopener, since: number): boolean {
  return reopen.generation !== since || reopen.inFlight !== undefined
}

/**
 * The items of `read(after)` (everything after the key `after`, in key
 * order), read again after the last key given when a reopen cut the read
 * short: at most STORAGE_RANGE_REOPEN_RETRIES times. `resumable` false: the
 * read cannot go on from a key (a query with orders, an offset or a limit),
 * and fails as it was cut.
 */
async function * readOn<T> (g: ReadGuard, read: (after: string | undefined) => AsyncIterable<T> | Iterable<T>, keyOf: (item: T) => string, resumable: boolean): AsyncGenerator<T> {
  let last: string | undefined
  for (let tries = 0; ; tries++) {
    await readable(g)
    const since = g.reopen?.generation ?? 0
    try {
      for await (const item of read(last)) {
        last = keyOf(item)
        yield item
      }
      return
    } catch (err) {
      const shut = g.shut(err)
      if (shut !== undefined) throw shut
      if (!closedUnderneath(err) || !resumable || g.reopen === undefined || tries >= STORAGE_RANGE_REOPEN_RETRIES || !cutByReopen(g.reopen, since)) throw err
    }
  }
}

/** What the reads of a guarded store go by. */
export interface ReadGuard {
  /** The LevelDB's reopener (undefined: a store with nothing to reopen). */
  reopen: Reopener | undefined
  /** What a read waits for first (undefined: nothing). */
  ready: () => Promise<void> | undefined
  /** The error a read fails with instead of `err` once the store was closed for good; undefined while it is not. */
  shut: (err: unknown) => Error | undefined
}

/** Throws the store's closed error when it was closed for good, else waits for what `ready` says. */
async function readable (g: ReadGuard): Promise<void> {
  const shut = g.shut(undefined)
  if (shut !== undefined) throw shut
  const wait = g.ready()
  if (wait !== undefined) await wait
}

/** A key that is not there is an answer, whenever it came: only a read's failures become the closed error. */
function isNotFound (err: unknown): boolean {
  return err instanceof Error && err.name === 'NotFoundError'
}

/**
 * One point read of `g`'s store: the closed error once it was closed for good, before or while it was read.
 * Without promise layers of its own on the way (a delegation makes several point reads, each a hop less).
 */
function pointRead<T> (g: ReadGuard, read: () => Promise<T>): Promise<T> {
  const shut = g.shut(undefined)
  if (shut !== undefined) return Promise.reject(shut)
  const wait = g.ready()
  const reading = wait === undefined ? read() : wait.then(read)
  return reading.catch((err: unknown) => { throw (isNotFound(err) ? undefined : g.shut(err)) ?? err })
}

/** A query that can go on from a key: the default (key) order, all of it. */
function resumableQuery (q: { orders?: unknown[], offset?: number, limit?: number }): boolean {
  return (q.orders === undefined || q.orders.length === 0) && q.offset === undefined && q.limit === undefined
}

/** `q` for the entries after the key `last` only (keys are ASCII here, so string order is LevelDB's). */
function pairsAfter (q: Query, last: string | undefined): Query {
  return last === undefined ? q : { ...q, filters: [...(q.filters ?? []), (p: Pair) => p.key.toString() > last] }
}

/** `q` for the keys after `last` only. */
function keysAfter (q: KeyQuery, last: string | undefined): KeyQuery {
  return last === undefined ? q : { ...q, filters: [...(q.filters ?? []), (k: Key) => k.toString() > last] }
}

/** The reads of `ds`, each waiting for `g.ready()` first when it is set, and failing as `g.shut` says once the store was closed. */
export function readsOf (ds: Datastore, g: ReadGuard): Record<string, unknown> {
  return {
    get: async (k: Key, o?: ReadOptions) => pointRead(g, async () => ds.get(k, o)),
    has: async (k: Key, o?: ReadOptions) => pointRead(g, async () => ds.has(k, o)),
    getMany: async function * (source: AsyncIterable<Key> | Iterable<Key>, o?: GetManyOptions) {
      await readable(g)
      try {
        yield * ds.getMany(source, o)
      } catch (err) {
        throw (isNotFound(err) ? undefined : g.shut(err)) ?? err
      }
    },
    query: (q: Query, o?: QueryOptions) => readOn(g, last => ds.query(pairsAfter(q, last), o), p => p.key.toString(), resumableQuery(q)),
    queryKeys: (q: KeyQuery, o?: QueryOptions) => readOn(g, last => ds.queryKeys(keysAfter(q, last), o), k => k.toString(), resumableQuery(q))
  }
}
