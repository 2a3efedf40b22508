/**
 * Reads where a missing key is an answer, not a failure. Anything else the
 * datastore throws (a closed or broken store) reaches the caller.
 */
import type { Datastore, Key } from 'interface-datastore'
import { AapError } from '../errors.ts'
import { KEY_SHOWN_MAX_CHARS } from './constants.ts'

/**
 * The abstract-level database under a LevelDB datastore (datastore-level's
 * `db`, seen through the node's wrappers), when it has `method`; undefined
 * for any other datastore, and while the write guard opens it again.
 */
export function levelDbWith<T> (ds: object, method: string): T | undefined {
  // a store being opened again (write-guard.ts) is closed meanwhile: read through the datastore, which waits
  if ((ds as { reopening?: unknown }).reopening === true) return undefined
  const db = (ds as { db?: unknown }).db
  if (db === null || typeof db !== 'object') return undefined
  return typeof (db as Record<string, unknown>)[method] === 'function' ? db as T : undefined
}

/** classic-level's synchronous read (3.0 and later). */
interface SyncReads { getSync: (key: string) => unknown }

const syncReads = (ds: object): SyncReads | undefined => levelDbWith<SyncReads>(ds, 'getSync')

/**
 * Whether `key` is held. A LevelDB datastore is asked on this thread
 * (classic-level's getSync): a point lookup is answered from LevelDB's
 * memtable, its tables' filters and its block cache, and costs about 3 to
 * 5 µs of CPU, where the async read's hop to the libuv thread pool costs
 * about 100 µs (a missing key among 20,000, this machine). Any other
 * datastore is asked as usual.
 */
export async function hasKey (ds: Pick<Datastore, 'has'>, key: Key): Promise<boolean> {
  const level = syncReads(ds)
  if (level === undefined) return ds.has(key)
  return level.getSync(key.toString()) !== undefined
}

function isNotFound (err: unknown): boolean {
  return err instanceof Error && err.name === 'NotFoundError'
}

/** The value under `key`, or undefined when there is none (from LevelDB on this thread, as `hasKey`). */
export async function readOptional (ds: Pick<Datastore, 'get'>, key: Key): Promise<Uint8Array | undefined> {
  const level = syncReads(ds)
  if (level !== undefined) return level.getSync(key.toString()) as Uint8Array | undefined
  try {
    return await ds.get(key)
  } catch (err) {
    if (isNotFound(err)) return undefined
    throw err
  }
}

const dec = new TextDecoder()


/** `key` as an error or a log line names it (cut to KEY_SHOWN_MAX_CHARS). */
export const shownKey = (key: Key | string): string => key.toString().slice(0, KEY_SHOWN_MAX_CHARS)

/**
 * A stored record that does not parse (a torn write, a disk fault): INTERNAL
 * with reason `corrupt_record` and the record's key, never a SyntaxError. A
 * scan skips such a record (logged, counted); a point read answers with this.
 */
export class CorruptRecordError extends AapError {
  readonly key: string
  constructor (key: Key | string, options?: { cause?: unknown }) {
    const k = shownKey(key)
    super('INTERNAL', `the stored record ${k} is damaged (does not parse)`, { reason: 'corrupt_record', key: k }, options)
    this.name = 'CorruptRecordError'
    this.key = k
  }
}

/** Whether `err` is a damaged stored record (CorruptRecordError). */
export function isCorruptRecord (err: unknown): err is CorruptRecordError {
  return err instanceof CorruptRecordError
}

/** `bytes` (stored under `key`) as JSON; a CorruptRecordError when they do not parse. */
export function parseRecord<T> (bytes: Uint8Array, key: Key | string): T {
  try {
    return JSON.parse(dec.decode(bytes)) as T
  } catch (err) {
    throw new CorruptRecordError(key, { cause: err })
  }
}

/** The JSON value under `key`, or undefined when there is none; a CorruptRecordError when it does not parse. */
export async function readJson<T> (ds: Pick<Datastore, 'get'>, key: Key): Promise<T | undefined> {
  const bytes = await readOptional(ds, key)
  return bytes === undefined ? undefined : parseRecord<T>(bytes, key)
}
