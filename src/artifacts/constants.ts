/**
 * Limits of the artifact store (src/artifacts) added after src/constants.ts
 * filled up; protocols/artifact.md names them like the others
 * (test/wire-docs.test.ts reads this file too).
 */

/**
 * Most artifacts one store holds, whatever their size: the store keeps a
 * small entry per artifact in memory (protocols/artifact.md, "Storage"). Past
 * it, a new artifact evicts a cached one as a full store does, or is refused
 * with STORAGE_FULL (`reason: too_many_artifacts`).
 */
export const ARTIFACT_STORE_MAX_ARTIFACTS = 100_000
/** Artifacts one page of GET /v1/artifacts lists unless `limit` says fewer. */
export const ARTIFACT_LIST_DEFAULT_LIMIT = 100
/** Most artifacts one page of GET /v1/artifacts lists (`limit` at most this). */
export const ARTIFACT_LIST_MAX_LIMIT = 1_000
/**
 * A use of an artifact (read, served, fetched again) is written to its manifest file's modification time at most
 * this often: the store orders its copies by that time when it opens, so the eviction order outlives a restart to
 * within this much.
 */
export const ARTIFACT_USE_PERSIST_MS = 60_000
/**
 * Percent of the store's bounds (bytes and artifacts) that run outputs (a handler's `ctx.artifact`) may keep
 * pinned. Anyone allowed to call a capability starts its runs, so their outputs, pinned without a bound, let
 * strangers fill the store for good; past this share the least recently used run outputs become copies, which
 * a write may evict. The operator's own uploads are pinned without a bound (protocols/artifact.md, "Storage").
 */
export const ARTIFACT_RUN_OUTPUT_PIN_PERCENT = 50
/**
 * Least average rate, in bytes per second, at which one holder must deliver the chunks a fetch asks it for. Each
 * answer must still come within ARTIFACT_CHUNK_TIMEOUT_MS of the one before, but that alone let a holder that sends
 * one chunk just under every timeout hold a 128-chunk fetch for half an hour. 128 KiB/s (1 Mbit/s) is below any
 * broadband uplink, so an honest holder meets it; one that does not is dropped for the next, and what it sent is
 * kept. A holder so dropped is asked again last, without this bound, once every other holder tried has failed: a
 * slow or shared link that is the only holder still completes the fetch (protocols/artifact.md, "The protocol").
 */
export const ARTIFACT_FETCH_MIN_BYTES_PER_SEC = 128 * 1024
/**
 * Time a holder is given on top of what ARTIFACT_FETCH_MIN_BYTES_PER_SEC allows for the bytes asked of it: a small
 * artifact's deadline is then not shorter than a dial's first round trips and a holder's first disk reads.
 */
export const ARTIFACT_FETCH_RATE_GRACE_MS = 30_000
/**
 * Most failed fetches whose verified chunks are kept (staged in the store's `tmp/`), so that the next fetch of the
 * same artifact asks only for the chunks still missing; past it the oldest kept goes.
 */
export const ARTIFACT_KEPT_FETCHES_MAX = 16
/** Most bytes the kept chunks of failed fetches take together (two of the largest artifacts); past it the oldest go. */
export const ARTIFACT_KEPT_FETCH_MAX_BYTES = 256 * 1024 * 1024
/** How long the chunks of a failed fetch are kept for a retry; they also go when a write needs room the store cannot make otherwise. */
export const ARTIFACT_KEPT_FETCH_TTL_MS = 10 * 60_000
