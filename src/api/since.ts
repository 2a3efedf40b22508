/**
 * The one check of a `since` instant (GET /v1/runs), shared by the node's API
 * and the CLI that checks its argument before asking. The document's pattern
 * admits text that is no instant (month 13, hour 99) or one past
 * API_RUNS_SINCE_MAX_MS, which the run index would read as the epoch (every
 * run listed); February 30 is no instant either (Date.parse rolls it into
 * March). One before the epoch lists every run, and rightly.
 */
import { API_RUNS_SINCE_MAX_MS } from './constants.ts'

const MONTHS_OF_30_DAYS = new Set([4, 6, 9, 11])

/** Whether `since` (already matching the document's RFC 3339 pattern) names a real instant from year 0000 to 9999. */
export function isSinceInstant (since: string): boolean {
  const ms = Date.parse(since)
  if (!Number.isFinite(ms) || ms > API_RUNS_SINCE_MAX_MS) return false
  const [y = 0, m = 0, d = 0] = since.slice(0, 10).split('-').map(Number)
  const leap = y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0)
  const days = m === 2 ? (leap ? 29 : 28) : MONTHS_OF_30_DAYS.has(m) ? 30 : 31
  return d <= days
}
