/**
 * Closing and opening again the LevelDB under a datastore-level datastore,
 * for the write guard (write-guard.ts) after a refused write. LevelDB's own
 * answer to a failed write is not enough:
 *
 * - a log write that failed (ENOSPC) may leave a torn record; LevelDB goes on
 *   appending after it, and the next open reads the log only up to the tear,
 *   so every write acknowledged after it is lost (google/leveldb#1180);
 * - a table write that failed (a memtable flush) leaves an error LevelDB
 *   keeps: every later write fails, whatever the disk does, until the
 *   database is closed.
 *
 * Opening again reads the log up to the tear (everything acknowledged before
 * the failure) and starts a new log, and clears the kept error.
 */
import { statfs } from 'node:fs/promises'
import { setTimeout as delay } from 'node:timers/promises'
import { STORAGE_REOPEN_INTERVAL_MS, STORAGE_REOPEN_MIN_FREE_BYTES } from './constants.ts'

/**
 * Opening one LevelDB again, shared by every guard over it (a node started
 * again on the store it stopped with has a guard of its own): one reopen at
 * a time, at most one per STORAGE_REOPEN_INTERVAL_MS, and whether one is due.
 */
export interface Reopener {
  /** A write was refused: no write may reach the store before it has been opened again. */
  readonly due: boolean
  /** A reopen waiting for its turn or in flight: writes wait for it. */
  readonly pending: Promise<void> | undefined
  /** The close and open in flight (the store is closed meanwhile): reads wait for it. */
  readonly inFlight: Promise<void> | undefined
  /** Reopens started so far: a read cut by a close tells a reopen's from others by it. */
  readonly generation: number
  /** Writes refused so far: a write that ends beside a refused one may be dropped by the reopen (write-guard.ts). */
  readonly refusals: number
  /** Whether the LevelDB is open (a reopen whose open failed leaves it closed until the next try). */
  readonly isOpen: boolean
  markDue: () => void
  /**
   * Resolves once the store is open again (at once when no reopen is due),
   * waiting out what is left of STORAGE_REOPEN_INTERVAL_MS since the last
   * try first; throws why the reopen failed (the writers waiting hear it).
   */
  ensure: () => Promise<void>
  /** The store is being closed for good: no reopen starts from now on; the one pending, if any, is returned. */
  shut: () => Promise<void> | undefined
}

/** What a reopen needs of a classic-level database and its datastore. */
interface ReopenableLevel {
  location: string
  status: string
  open: (options: object) => Promise<void>
  close: () => Promise<void>
}

function isReopenable (db: unknown): db is ReopenableLevel {
  const d = db as Partial<Record<keyof ReopenableLevel, unknown>> | null | undefined
  return typeof d?.location === 'string' && typeof d.open === 'function' && typeof d.close === 'function'
}

const reopeners = new WeakMap<object, Reopener>()

/** The reopener of a datastore-level datastore's LevelDB (undefined for any other store: nothing there to reopen). */
export function levelReopener (ds: unknown): Reopener | undefined {
  const db: unknown = (ds as { db?: unknown } | null | undefined)?.db
  if (!isReopenable(db)) return undefined
  let r = reopeners.get(db)
  if (r === undefined) {
    const opts: unknown = (ds as { opts?: unknown }).opts
    r = newReopener(db, typeof opts === 'object' && opts !== null ? opts : { createIfMissing: true, compression: false })
    reopeners.set(db, r)
  }
  return r
}

function newReopener (db: ReopenableLevel, options: object): Reopener {
  let due = false
  let pending: Promise<void> | undefined
  let inFlight: Promise<void> | undefined
  let lastTry = -Infinity
  let shut = false
  let generation = 0
  let refusals = 0
  const reopen = async (): Promise<void> => {
    // opening writes the old log's contents to a table and starts a new log: on a disk still full that fails
    // half way and leaves the store closed, so it is not tried without room
    const fs = await statfs(db.location)
    const free = fs.bavail * fs.bsize
    if (free < STORAGE_REOPEN_MIN_FREE_BYTES) {
      throw Object.assign(new Error(`ENOSPC: ${free} bytes free where the store is; it is opened again with ${STORAGE_REOPEN_MIN_FREE_BYTES} at least`), { code: 'ENOSPC' })
    }
    if (db.status === 'open') await db.close()
    await db.open(options)
  }
  const ensure = async (): Promise<void> => {
    if (pending === undefined) {
      if (!due) return
      // a disk that keeps failing is not reopened more often than this: every writer meanwhile waits for the same try
      const wait = lastTry + STORAGE_REOPEN_INTERVAL_MS - performance.now()
      lastTry = Math.max(performance.now(), lastTry + STORAGE_REOPEN_INTERVAL_MS)
      const start = async (): Promise<void> => {
        if (shut) throw new Error('the store was closed: it is not opened again')
        generation++
        inFlight = reopen()
        await inFlight
        due = false
      }
      // with no wait the close starts now: `inFlight` is set before the caller's next read
      pending = (wait > 0 ? delay(wait).then(start) : start()).finally(() => {
        pending = undefined
        inFlight = undefined
      })
    }
    await pending
    // a write refused by another guard's store while this reopen was in flight made another one due
    if (due) await ensure()
  }
  return {
    get due () { return due },
    get pending () { return pending },
    get inFlight () { return inFlight },
    get generation () { return generation },
    get refusals () { return refusals },
    get isOpen () { return db.status === 'open' },
    markDue: () => {
      due = true
      refusals++
    },
    ensure,
    shut: () => {
      shut = true
      return pending
    }
  }
}
