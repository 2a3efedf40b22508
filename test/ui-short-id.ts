/**
 * How the view shortens an id (src/ui/assets/timeline.js shortId), for the browser tests that look for it:
 * without the `12D3KooW` every agent id starts with, its first and last 8 characters.
 */
export function shortId (id: string): string {
  const s = id.startsWith('12D3KooW') && id.length > 24 ? id.slice(8) : id
  return s.length <= 18 ? s : `${s.slice(0, 8)}…${s.slice(-8)}`
}

/** How the view shortens a run id: shortId of the part after the colon. */
export function shortRun (runId: string): string {
  return shortId(runId.split(':')[1] ?? runId)
}
