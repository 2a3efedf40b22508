/**
 * The at-rest tables and figures of the scaling report (scaling.ts), and the
 * number formats they share with it.
 */
import type { DiscoverWork, Pcts, QuietWork, ScaleRow } from './scaling.ts'

export function quietTable (rows: ScaleRow[], pass: (r: ScaleRow) => [Pcts | undefined, Pcts | undefined, QuietWork | undefined]): string[] {
  return [
    '| nodes | discovers | whole discover p50 / p99 (ms) | first verified card p50 / p99 (ms) | DHT answers per lookup | lookups that walked | cards fetched per lookup | holder asks / cards from holders per lookup | asks by key per lookup | holder cards not backed when they came | cards refused per lookup | connections dialed per lookup | found nothing | machine CPU busy: during / just before | waited for the machine to rest | before each discover: mean wait / started unsettled |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(r => {
      const [whole, first, w] = pass(r)
      return `| ${r.nodes} | ${whole?.n ?? '–'} | ${pp(whole)} | ${pp(first)} | ${f1(w?.answers_per_lookup)} | ${share(w?.walked_share)} | ${f1(w?.cards_per_lookup)} | ${held(w)} | ${f1(w?.key_asks_per_lookup)} | ${share(w?.unbacked_share)} | ${f1(w?.rejected_per_lookup)} | ${f1(w?.dials_per_lookup)} | ${w?.empty ?? '–'} | ${w === undefined ? '–' : `${(w.machine_busy * 100).toFixed(0)} % / ${(w.machine_busy_idle * 100).toFixed(0)} %`} | ${w?.rest_wait_s === undefined ? '–' : `${w.rest_wait_s.toFixed(0)} s${w.rested === true ? '' : ', not at rest'}`} | ${w?.unsettled === undefined ? '–' : `${(w.settle_ms ?? 0).toFixed(0)} ms / ${w.unsettled}`} |`
    }),
    ''
  ]
}

/** What the columns added in session 70 count (rows made before have a dash there). */
export const QUIET_COLUMNS_NOTE = 'Since session 70 three more columns: the contacts asked for the key\'s cards at once (src/card/held-cards.ts, by key), the share of the cards holders sent that came before any other source named their agent (src/card/fetch-order.ts `backed`; the agent is then asked itself unless another source names it meanwhile), and the cards refused (forged, or of an agent not asked for).'

export const held = (w: DiscoverWork | undefined): string => w === undefined ? '–' : `${f1(w.held_asks_per_lookup)} / ${f1(w.held_cards_per_lookup)}`
export const f1 = (x: number | undefined): string => x === undefined ? '–' : x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2)
export const pp = (p: Pcts | undefined): string => p === undefined || p.n === 0 ? '–' : `${f1(p.p50)} / ${f1(p.p99)}`
export const share = (x: number | undefined): string => x === undefined ? '–' : `${(x * 100).toFixed(0)} %`

/**
 * One round trip at rest per size (a ping to a connected peer before each
 * discover of the first kind) and the whole discover at rest in such round
 * trips (p50 over p50): how much of the discover's growth with N is the
 * machine's (every hop waits for processes that N nodes share), and how much
 * the requests the protocol adds.
 */
export function roundTripLine (rows: ScaleRow[]): string {
  const w = rows.filter(r => (r.quiet_round_trip?.n ?? 0) > 0 && (r.quiet_round_trip?.p50 ?? 0) > 0 && (r.quiet_discover?.p50 ?? 0) > 0).sort((a, b) => a.nodes - b.nodes)
  const base = w[0]
  if (base === undefined || w.length < 2) return 'Not enough sizes with a round trip at rest to compare (measured since session 68).'
  const trips = (r: ScaleRow): number => (r.quiet_discover?.p50 ?? 0) / (r.quiet_round_trip?.p50 ?? 1)
  const failed = (r: ScaleRow): string => (r.quiet_discover_work?.round_trip_failures ?? 0) > 0 ? ` (${r.quiet_discover_work?.round_trip_failures ?? 0} failed)` : ''
  const rt = w.map(r => `${f1(r.quiet_round_trip?.p50)} ms at ${r.nodes} nodes${failed(r)}`).join(', ')
  const growth = w.slice(1).map(r => `×${(trips(r) / trips(base)).toFixed(2)} at ${r.nodes} nodes (ln N ×${(Math.log(r.nodes) / Math.log(base.nodes)).toFixed(2)})`).join(', ')
  return `One round trip at rest (a ping to a connected peer before each discover), p50: ${rt}. The whole discover at rest in such round trips, p50 over p50: ${w.map(r => `${trips(r).toFixed(1)} at ${r.nodes} nodes`).join(', ')}; against ${base.nodes} nodes ${growth}.`
}
