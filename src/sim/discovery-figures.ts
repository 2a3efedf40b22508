/**
 * The discovery counters of a simulation's report: summed over nodes, and
 * what a phase added (DiscoveryStats, src/card/discovery-stats.ts).
 */
/** Counters summed over nodes: DiscoveryStats, or any other record of counts (PeerRecordStats). */
export function sumStats (all: readonly object[]): Record<string, number> {
  const out: Record<string, number> = {}
  for (const s of all) for (const [k, v] of Object.entries(s)) if (typeof v === 'number') out[k] = (out[k] ?? 0) + v
  return out
}

export function diffStats (after: Record<string, number>, before: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(after).map(([k, v]) => [k, v - (before[k] ?? 0)]))
}
