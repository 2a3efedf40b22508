/**
 * Limits of the storage layer (src/storage) added after src/constants.ts
 * filled up.
 */

/**
 * The run store's writes are durable across a crash of the process at once
 * (LevelDB's log is written before a batch resolves) and across a power loss
 * once the log is synced to disk: at most this long after they were
 * acknowledged (durability.ts). 0 turns the sync off.
 */
export const STORAGE_SYNC_INTERVAL_MS = 1_000
/** The key the sync writes (its value: when, ms since the epoch). */
export const STORAGE_SYNC_KEY = '/aap/storage/synced'
/**
 * Operations in one batch the group committer writes, at most (a single
 * write larger than this still goes whole, in a batch of its own). Writes
 * handed over while a batch is written wait for the next one: after a slow
 * or stalled disk they went out as one batch of everything queued meanwhile
 * (4,000 writes, 63 MiB, in session 49's review); they now go in batches of
 * this size, one after another, in order.
 */
export const STORAGE_BATCH_MAX_OPS = 2048
/**
 * The memory datastore (compact-memory.ts) keeps its keys sorted for prefix
 * queries. New keys wait unsorted until the next query; up to this many are
 * then put in place one by one (a binary search and a move each), more are
 * sorted and merged in one pass. One sorted insert per put made filling the
 * store quadratic (100,000 puts: 3.1 s against 89 ms, session 49's review).
 */
export const MEMORY_STORE_INSERTS_ONE_BY_ONE_MAX = 16
/**
 * Deleted keys the memory datastore leaves in its sorted list (skipped by
 * queries) before it drops them, at least; past it, once they are half the
 * list, the next query drops them in one pass.
 */
export const MEMORY_STORE_STALE_KEYS_MIN = 1024
/**
 * A LevelDB write that failed (a full or failing disk) can leave a torn
 * record in its log, and LevelDB goes on appending after it: every write it
 * acknowledges from then on is dropped when the log is read at the next open
 * (google/leveldb#1180). A flush that failed leaves an error LevelDB keeps
 * until it is closed. So after a refused write the store takes no write until
 * it has been closed and opened again (write-guard.ts), and it is reopened no
 * more often than this while it keeps failing: a write waits at most this
 * long for its try (a fault that cleared costs the next write that much).
 */
export const STORAGE_REOPEN_INTERVAL_MS = 100
/**
 * Free bytes the data dir's file system must have before the store is
 * reopened: opening writes the log's contents to a table file (up to
 * LevelDB's 4 MiB write buffer) and starts a new log. Below it the store
 * stays refused (no_space) without trying.
 */
export const STORAGE_REOPEN_MIN_FREE_BYTES = 16 * 1024 * 1024
/**
 * Times a range read (range.ts) that a reopen closed under it goes on after
 * the last key it gave, once the store is open again, before the read fails.
 */
export const STORAGE_RANGE_REOPEN_RETRIES = 2
/**
 * Bytes of writes (keys and values) that may wait in the group committer
 * behind the batch being written, at most, before a write that may linger
 * (copies of other nodes' events, which can be fetched again) is refused at
 * once (StorageFullError, reason queue_full); with no batch being written,
 * what waits goes to the disk instead. So a stalled disk holds at most about
 * twice this of such writes in memory: the stalled batch and the queue. It
 * had queued every copy the mesh published, without a bound (402 copies,
 * 9.6 MiB, for one run of 400 events in session 49's review; a hostile
 * executor may publish 65,536 events of up to 48 KiB a run). Writes that do
 * not linger (the node's own runs and records) are never refused by it: their
 * writers wait for each write, which bounds them.
 */
export const STORAGE_QUEUE_MAX_BYTES = 4 * 1024 * 1024

/** Characters of a damaged record's key named in an error or a log line (a key can be long). */
export const KEY_SHOWN_MAX_CHARS = 300
