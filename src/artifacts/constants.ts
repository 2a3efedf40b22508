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
