/**
 * Ordered reads of a key range: the entries under a prefix that come after a
 * given key, in key order. A LevelDB datastore seeks straight to the start
 * (its `db` iterator takes bounds); any other datastore (the memory one of
 * tests and ephemeral nodes) is read with a prefix query and skips to the
 * start. Keys are compared as strings, so callers keep them ASCII (the byte
 * order LevelDB uses is then the same). Only the LevelDB path reads no more
 * than it yields; the memory path reads (and sorts) the whole prefix.
 */
import { Key, type Datastore } from 'interface-datastore'
import { STORAGE_RANGE_REOPEN_RETRIES } from './constants.ts'
import { closedUnderneath, cutByReopen } from './guarded-reads.ts'
import { levelDbWith } from './read.ts'
import { closedStoreError, type GuardedDatastore } from './write-guard.ts'

export interface RangeQuery {
  /** Only keys that start with this. */
  prefix: string
  /** Only keys strictly after this one. */
  gt?: string
  /** Only keys at or after this one. */
  gte?: string
  /** Only keys strictly before this one. */
  lt?: string
  /** Newest key first. */
  reverse?: boolean
  /** Read values too (default true). */
  values?: boolean
}

export interface RangeEntry { key: string, value: Uint8Array | undefined }

/** What this module needs of a classic-level/abstract-level database. */
interface LevelLike {
  iterator: (opts: Record<string, unknown>) => AsyncIterable<[string, Uint8Array | undefined]> & { close: () => Promise<void> }
}

const levelOf = (ds: Datastore): LevelLike | undefined => levelDbWith<LevelLike>(ds, 'iterator')

function after (key: string, q: RangeQuery): boolean {
  if (q.gt !== undefined && key <= q.gt) return false
  if (q.gte !== undefined && key < q.gte) return false
  if (q.lt !== undefined && key >= q.lt) return false
  return true
}

/** The entries of the range in key order; stop iterating to stop reading. */
export async function * readRange (ds: Datastore, q: RangeQuery): AsyncGenerator<RangeEntry> {
  const values = q.values !== false
  const level = levelOf(ds)
  if (level !== undefined) {
    const end = `${q.prefix}\xFF`
    // the last key given: a read the write guard's reopen cut short (write-guard.ts) goes on after it
    const reopen = (ds as Partial<Pick<GuardedDatastore, 'reopener'>>).reopener
    let last: string | undefined
    for (let tries = 0; ; tries++) {
      const opts: Record<string, unknown> = { keys: true, values, keyEncoding: 'utf8', valueEncoding: 'view', lt: q.lt !== undefined && q.lt < end ? q.lt : end, reverse: q.reverse === true }
      let low = q.prefix
      let strict = false
      if (q.gte !== undefined && q.gte > low) low = q.gte
      if (q.gt !== undefined && q.gt >= low) {
        low = q.gt
        strict = true
      }
      if (last !== undefined && q.reverse !== true) {
        low = last
        strict = true
      }
      opts[strict ? 'gt' : 'gte'] = low
      if (last !== undefined && q.reverse === true) opts.lt = last
      const since = reopen?.generation ?? 0
      let it: ReturnType<LevelLike['iterator']> | undefined
      try {
        it = level.iterator(opts)
        for await (const [key, value] of it) {
          if (!after(key, q)) continue
          last = key
          yield { key, value: values ? value : undefined }
        }
        return
      } catch (err) {
        // closed for good (the node stopped): the typed error its writes fail with too (write-guard.ts)
        if (closedUnderneath(err) && (ds as Partial<Pick<GuardedDatastore, 'health'>>).health?.closed === true) throw closedStoreError(err)
        // closed by a reopen: read on once the store is open again
        if (!closedUnderneath(err) || reopen === undefined || tries >= STORAGE_RANGE_REOPEN_RETRIES || !cutByReopen(reopen, since)) throw err
        const wait = (ds as Partial<Pick<GuardedDatastore, 'readReady'>>).readReady?.()
        if (wait !== undefined) await wait
      } finally {
        await it?.close()
      }
    }
  }
  // no ordered iterator (a memory datastore keeps insertion order): read the prefix and sort it
  const found: RangeEntry[] = []
  if (values) {
    for await (const { key, value } of ds.query({ prefix: q.prefix })) {
      const k = key.toString()
      if (after(k, q)) found.push({ key: k, value })
    }
  } else {
    for await (const key of ds.queryKeys({ prefix: q.prefix })) {
      const k = key.toString()
      if (after(k, q)) found.push({ key: k, value: undefined })
    }
  }
  const dir = q.reverse === true ? -1 : 1
  found.sort((a, b) => (a.key < b.key ? -dir : a.key > b.key ? dir : 0))
  yield * found
}

/** How many keys the range holds (a key-only read). */
export async function countRange (ds: Datastore, prefix: string): Promise<number> {
  let n = 0
  for await (const _ of readRange(ds, { prefix, values: false })) n++
  return n
}

/** A Key for a string built of already-encoded segments. */
export function rawKey (key: string): Key {
  return new Key(key, false)
}
