/**
 * Bounds of the campaign's own machinery (not of the node under test).
 */

/**
 * A part of the quick campaign (`--quick`, the CI form) that has not ended
 * after this many ms fails with a timeout error, and the campaign goes on
 * with the next part. Each quick part takes well under two minutes.
 */
export const PART_TIMEOUT_QUICK_MS = 600_000

/**
 * ...and of the full campaign: its longest part, kill9, storms for up to
 * 18 minutes and settles after; the spam floods stop within 11 minutes.
 */
export const PART_TIMEOUT_FULL_MS = 3_600_000

/**
 * An SSE reader of the slow-clients part must see its stream's "ready"
 * event (or, for a reader that keeps no text, its first bytes) within this
 * many ms, or the part fails instead of waiting forever.
 */
export const READER_READY_TIMEOUT_MS = 30_000
