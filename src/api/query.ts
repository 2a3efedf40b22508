/**
 * What the query string of the events routes says about a correlation: the
 * owner whose task it is, and the participants and runs the caller knows of.
 */

function strings (v: unknown): string[] {
  return Array.isArray(v) ? v.filter((s): s is string => typeof s === 'string') : []
}

export function correlationHints (q: Record<string, unknown>): { owner?: string, participants?: string[], runs?: string[] } {
  const participants = strings(q.participant)
  const runs = strings(q.run)
  return {
    ...(typeof q.owner === 'string' ? { owner: q.owner } : {}),
    ...(participants.length > 0 ? { participants } : {}),
    ...(runs.length > 0 ? { runs } : {})
  }
}
