/**
 * Simulation report: JSON for machines, a self-contained HTML page (inline
 * SVG, no script, no network) for people, and a short text summary.
 */
import type { ProcessFigures } from './resources.ts'

export interface Summary {
  n: number
  p50: number
  p90: number
  p99: number
  max: number
  mean: number
}

/** Samples kept per latency series. */
const MAX_SAMPLES = 20_000

/** One latency series of a simulation, filled as it runs. */
export class Counter {
  readonly samples: number[] = []
  add (ms: number): void { if (this.samples.length < MAX_SAMPLES) this.samples.push(ms) }
  series (name: string): LatencySeries { return { name, unit: 'ms', summary: summarize(this.samples), samples: this.samples } }
}

export function summarize (samples: number[]): Summary {
  if (samples.length === 0) return { n: 0, p50: 0, p90: 0, p99: 0, max: 0, mean: 0 }
  const s = [...samples].sort((a, b) => a - b)
  const at = (q: number): number => s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] ?? 0
  return { n: s.length, p50: at(0.5), p90: at(0.9), p99: at(0.99), max: s[s.length - 1] ?? 0, mean: s.reduce((a, b) => a + b, 0) / s.length }
}

export interface LatencySeries {
  name: string
  unit: 'ms'
  summary: Summary
  /** Kept for the charts; capped by the caller. */
  samples: number[]
}

export interface SimReport {
  title: string
  command: string
  started_at: string
  /** The commit it ran from (commit.ts); absent in reports made before it was recorded. */
  commit?: string
  duration_ms: number
  machine: { cpus: number, cpu_model: string, node: string, platform: string }
  config: Record<string, unknown>
  invariants: {
    tasks: number
    tasks_completed: number
    traces_satisfying_contracts: number
    runs_acknowledged: number
    runs_lost: number
    forged_attempted: number
    forged_accepted: number
    events_expected: number
    events_delivered: number
    events_lost: number
  }
  latency: LatencySeries[]
  resources: {
    nodes: number
    rss_bytes: number
    rss_per_node_bytes: number
    /** Highest RSS of the process during the run. */
    rss_peak_bytes: number
    heap_used_bytes: number
    cpu_user_ms: number
    cpu_system_ms: number
    cpu_cores_busy: number
    /** How late the event loop (which every in-process node shares) ran its timers. */
    event_loop_delay_ms: { p50: number, p99: number, max: number }
  }
  /** Each process of the simulation (this one first, then any group processes), measured at the end of the tasks. */
  processes?: ProcessFigures[]
  /**
   * Open connections per node, sampled every SIM_CONNECTION_SAMPLE_MS in
   * every process: the highest count each node reached (peak) and the count at
   * the end, as the maximum and the median over nodes, against the budget.
   */
  connections?: { bound: number, nodes: number, peak_max: number, peak_p50: number, end_max: number, end_p50: number, nodes_over_bound: number }
  /** Wall time of each phase: nodes up, cards announced, tasks run. */
  /** settle: after the last task, until every node was back under its connection bound (bounded; absent in older reports). */
  phases_ms: { start: number, announce: number, tasks: number, settle?: number, /** After the settle and the end figures: the wait until no node announced or waited to retry (the discovers at rest start then). */ announcements_over?: number }
  churn: { stops: number, restarts: number }
  /** Things that went wrong on the way without breaking an invariant, by kind (timed-out announcements, refused forgeries). */
  incidents: Record<string, number>
  /**
   * What the discovers of the tasks phase did, summed over the nodes that
   * drive tasks (DiscoveryStats counters: lookups, peers that answered them,
   * providers named, cards fetched, unreachable providers, discovers cut
   * short by their deadline). Absent in older reports.
   */
  discovery?: Record<string, number>
  /** What the discovers at rest after the tasks added (src/sim/quiet-discover.ts), with `empty`: those that found nothing, `machine_busy`: the machine's CPU busy meanwhile, 0 to 1 (`machine_busy_idle`: just before, nothing asked), `dials`: connections the discovering nodes dialed, and `unsettled`: discovers that started before the machine settled after the one before (`settle_ms`: the mean wait). */
  quiet_discovery?: Record<string, number>
  /** The same with every card from its agent (`fresh`), run right after. */
  quiet_fresh_discovery?: Record<string, number>
  failures: Array<{ task_id: string, problems: string[] }>
}

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')
const fmt = (n: number): string => n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2)

/** An SVG cumulative distribution of one latency series. */
function cdfSvg (series: LatencySeries): string {
  const w = 460
  const h = 220
  const pad = 40
  const s = [...series.samples].sort((a, b) => a - b)
  if (s.length === 0) return `<svg width="${w}" height="${h}"><text x="${pad}" y="${h / 2}">no samples</text></svg>`
  const max = Math.max(s[s.length - 1] ?? 1, 1e-3)
  const x = (v: number): number => pad + (v / max) * (w - pad * 1.5)
  const y = (q: number): number => h - pad - q * (h - pad * 1.5)
  const step = Math.max(1, Math.floor(s.length / 400))
  const pts: string[] = []
  for (let i = 0; i < s.length; i += step) pts.push(`${x(s[i] ?? 0).toFixed(1)},${y((i + 1) / s.length).toFixed(1)}`)
  pts.push(`${x(max).toFixed(1)},${y(1).toFixed(1)}`)
  const marks = [0.5, 0.99].map(q => {
    const v = series.summary[q === 0.5 ? 'p50' : 'p99']
    return `<line x1="${x(v)}" y1="${y(0)}" x2="${x(v)}" y2="${y(1)}" stroke="#c44" stroke-dasharray="3,3"/>` +
      `<text x="${x(v) + 3}" y="${y(q) - 4}" font-size="11" fill="#c44">p${q === 0.5 ? 50 : 99} ${fmt(v)} ms</text>`
  }).join('')
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" role="img" aria-label="${esc(series.name)} CDF">
<rect x="0" y="0" width="${w}" height="${h}" fill="#fff"/>
<line x1="${pad}" y1="${y(0)}" x2="${w - pad / 2}" y2="${y(0)}" stroke="#888"/>
<line x1="${pad}" y1="${y(0)}" x2="${pad}" y2="${y(1)}" stroke="#888"/>
<text x="${pad}" y="${h - 8}" font-size="11">0 ms</text><text x="${w - pad * 1.5}" y="${h - 8}" font-size="11">${fmt(max)} ms</text>
<text x="4" y="${y(1) + 4}" font-size="11">100%</text><text x="4" y="${y(0.5) + 4}" font-size="11">50%</text>
<polyline fill="none" stroke="#2a6" stroke-width="2" points="${pts.join(' ')}"/>${marks}
</svg>`
}

function row (cells: string[], tag = 'td'): string {
  return `<tr>${cells.map(c => `<${tag}>${c}</${tag}>`).join('')}</tr>`
}

export function renderHtml (r: SimReport): string {
  const inv = r.invariants
  const good = (ok: boolean): string => ok ? '<b style="color:#2a6">ok</b>' : '<b style="color:#c22">FAIL</b>'
  const invRows = [
    ['tasks completed', `${inv.tasks_completed} / ${inv.tasks}`, good(inv.tasks_completed === inv.tasks)],
    ['traces satisfying the four contracts', `${inv.traces_satisfying_contracts} / ${inv.tasks}`, good(inv.traces_satisfying_contracts === inv.tasks)],
    ['acknowledged runs lost', `${inv.runs_lost} of ${inv.runs_acknowledged}`, good(inv.runs_lost === 0)],
    ['forged items accepted', `${inv.forged_accepted} of ${inv.forged_attempted}`, good(inv.forged_accepted === 0)],
    ['events lost to subscribers', `${inv.events_lost} of ${inv.events_expected}`, good(inv.events_lost === 0)]
  ].map(c => row(c)).join('')
  const latRows = r.latency.map(s => row([esc(s.name), String(s.summary.n), fmt(s.summary.p50), fmt(s.summary.p90), fmt(s.summary.p99), fmt(s.summary.max)])).join('')
  const res = r.resources
  const charts = r.latency.map(s => `<figure><figcaption>${esc(s.name)} (CDF)</figcaption>${cdfSvg(s)}</figure>`).join('')
  const failures = r.failures.length === 0
    ? '<p>None.</p>'
    : `<ul>${r.failures.slice(0, 50).map(f => `<li><code>${esc(f.task_id)}</code>: ${esc(f.problems.join('; '))}</li>`).join('')}</ul>`
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(r.title)}</title>
<style>body{font:14px/1.4 system-ui,sans-serif;margin:2em;max-width:1000px}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}td:first-child,th:first-child{text-align:left}
figure{display:inline-block;margin:0 1em 1em 0}figcaption{font-weight:600}code{background:#f4f4f4;padding:1px 3px}</style></head>
<body><h1>${esc(r.title)}</h1>
<p>Command: <code>${esc(r.command)}</code> at commit <code>${esc(r.commit ?? 'unrecorded')}</code><br>Started ${esc(r.started_at)}, ran ${(r.duration_ms / 1000).toFixed(1)} s on ${r.machine.cpus} × ${esc(r.machine.cpu_model)}, Node ${esc(r.machine.node)} (${esc(r.machine.platform)}).</p>
<h2>Invariants</h2><table>${row(['invariant', 'value', 'verdict'], 'th')}${invRows}</table>
<h2>Latency (ms)</h2><table>${row(['series', 'n', 'p50', 'p90', 'p99', 'max'], 'th')}${latRows}</table>
${charts}
<h2>Resources</h2><table>${row(['nodes', 'RSS', 'RSS per node', 'peak RSS', 'heap used', 'CPU user', 'CPU system', 'cores busy', 'event-loop delay p50 / p99 / max'], 'th')}
${row([String(res.nodes), `${(res.rss_bytes / 2 ** 20).toFixed(0)} MiB`, `${(res.rss_per_node_bytes / 2 ** 20).toFixed(2)} MiB`, `${(res.rss_peak_bytes / 2 ** 20).toFixed(0)} MiB`, `${(res.heap_used_bytes / 2 ** 20).toFixed(0)} MiB`, `${(res.cpu_user_ms / 1000).toFixed(1)} s`, `${(res.cpu_system_ms / 1000).toFixed(1)} s`, res.cpu_cores_busy.toFixed(2), `${fmt(res.event_loop_delay_ms.p50)} / ${fmt(res.event_loop_delay_ms.p99)} / ${fmt(res.event_loop_delay_ms.max)} ms`])}</table>
${processesHtml(r)}
<p>Phases: nodes up in ${(r.phases_ms.start / 1000).toFixed(1)} s, cards announced in ${(r.phases_ms.announce / 1000).toFixed(1)} s, tasks ran for ${(r.phases_ms.tasks / 1000).toFixed(1)} s${r.phases_ms.settle === undefined ? '' : `, connections back under the bound ${(r.phases_ms.settle / 1000).toFixed(1)} s later`}${r.phases_ms.announcements_over === undefined ? '' : `, then ${(r.phases_ms.announcements_over / 1000).toFixed(1)} s until announcement retries were over`}.</p>
<p>Churn: ${r.churn.stops} stops, ${r.churn.restarts} restarts.</p>
<h2>Configuration</h2><pre>${esc(JSON.stringify(r.config, null, 2))}</pre>
<h2>Traces that broke a contract</h2>${failures}
</body></html>
`
}

/** Each process of the run and the connections per node, when the report has them. */
function processesHtml (r: SimReport): string {
  const c = r.connections
  const conn = c === undefined
    ? ''
    : `<p>Connections per node (bound ${c.bound}): peak ${c.peak_max} at most, ${c.peak_p50} at the median; at the end ${c.end_max} at most, ${c.end_p50} at the median; ${c.nodes_over_bound} nodes went over the bound.</p>`
  const procs = r.processes ?? []
  if (procs.length <= 1) return conn
  const mib = (b: number): string => `${(b / 2 ** 20).toFixed(0)} MiB`
  const rows = procs.map(p => row([p.role, String(p.nodes), mib(p.rss_bytes), mib(p.rss_start_bytes), `${(p.rss_bytes / p.nodes / 2 ** 20).toFixed(1)} MiB`, mib(p.heap_used_bytes),
    `${((p.cpu_user_ms + p.cpu_system_ms) / 1000).toFixed(1)} s`, `${fmt(p.event_loop_delay_ms.p99)} / ${fmt(p.event_loop_delay_ms.max)} ms`])).join('')
  return `${conn}<h2>Processes</h2><table>${row(['process', 'nodes', 'RSS', 'RSS before its nodes', 'RSS per node', 'heap used', 'CPU', 'event-loop delay p99 / max'], 'th')}${rows}</table>`
}

export function renderSummary (r: SimReport): string {
  const inv = r.invariants
  const lines = [
    `${r.title}: ${r.resources.nodes} nodes, ${inv.tasks} tasks in ${(r.duration_ms / 1000).toFixed(1)} s`,
    `  tasks completed            ${inv.tasks_completed}/${inv.tasks}`,
    `  traces meeting contracts   ${inv.traces_satisfying_contracts}/${inv.tasks}`,
    `  runs lost                  ${inv.runs_lost} (of ${inv.runs_acknowledged} acknowledged)`,
    `  forged items accepted      ${inv.forged_accepted} (of ${inv.forged_attempted} attempted)`,
    `  events lost                ${inv.events_lost} (of ${inv.events_expected})`
  ]
  const w = Math.max(...r.latency.map(s => s.name.length))
  lines.push(`  ${'latency (ms)'.padEnd(w)}      n      p50      p99      max`)
  for (const s of r.latency) {
    lines.push(`  ${s.name.padEnd(w)} ${String(s.summary.n).padStart(6)} ${fmt(s.summary.p50).padStart(8)} ${fmt(s.summary.p99).padStart(8)} ${fmt(s.summary.max).padStart(8)}`)
  }
  const lag = r.resources.event_loop_delay_ms
  lines.push(`  memory: ${(r.resources.rss_per_node_bytes / 2 ** 20).toFixed(2)} MiB RSS per node (peak ${(r.resources.rss_peak_bytes / r.resources.nodes / 2 ** 20).toFixed(2)}); CPU ${r.resources.cpu_cores_busy.toFixed(2)} cores busy; event-loop delay p50 ${fmt(lag.p50)} ms, p99 ${fmt(lag.p99)} ms`)
  const c = r.connections
  if (c !== undefined) lines.push(`  connections per node: peak max ${c.peak_max}, p50 ${c.peak_p50} (bound ${c.bound}, ${c.nodes_over_bound} nodes over it); processes ${(r.processes ?? []).map(p => p.nodes).join(' + ')}`)
  lines.push(`  phases: nodes up ${(r.phases_ms.start / 1000).toFixed(1)} s, cards announced ${(r.phases_ms.announce / 1000).toFixed(1)} s, tasks ${(r.phases_ms.tasks / 1000).toFixed(1)} s${r.phases_ms.settle === undefined ? '' : `, connections settled ${(r.phases_ms.settle / 1000).toFixed(1)} s`}${r.phases_ms.announcements_over === undefined ? '' : `, then ${(r.phases_ms.announcements_over / 1000).toFixed(1)} s until announcement retries were over`}`)
  const d = r.discovery
  if (d !== undefined) lines.push(`  discovery (task drivers): ${d.lookups ?? 0} lookups (${d.lookupWalks ?? 0} walked on), ${d.lookupAnswers ?? 0} answers (${d.connectedAnswers ?? 0} from connected contacts), ${d.lookupErrors ?? 0} failed requests, ${d.lookupProviders ?? 0} providers named, ${d.fetchedCards ?? 0} cards fetched, ${d.heldCardsReceived ?? 0} from the holders that named them, ${d.unreachableProviders ?? 0} unreachable (${d.rejectedCards ?? 0} cards rejected, ${d.providerFetchTimeouts ?? 0} fetches timed out, ${d.providerFetchesCutShort ?? 0} ended by the deadline), ${d.discoversCutShort ?? 0} cut short by the deadline`)
  const held = (r.processes ?? []).filter(p => p.role === 'group' && p.discovery !== undefined).map(p => p.discovery ?? {})
  const announced = (who: string, get: (k: string) => number): string =>
    `  announcements (${who}): ${get('providerWalks')} provider walks, ${get('providerRecordsSent')} provider records sent (${get('providerRecordsFailed')} sends failed), ${get('providerWalksCut')} walks cut at their bound, ${get('providerWalksConverged')} ended once converged, ${get('shortProviderWalks')} walks that sent too few, ${get('announceRetries')} retries`
  const hostileAnnounced = (r.processes ?? []).find(p => p.role === 'hostile')?.discovery
  if (hostileAnnounced !== undefined) lines.push(announced('hostile group', k => hostileAnnounced[k] ?? 0))
  if (held.length > 0) {
    const sum = (k: string): number => held.reduce((n, x) => n + (x[k] ?? 0), 0)
    lines.push(`  cards held for others (group processes, whole run): ${sum('heldCardPulls')} pulled, ${sum('heldCardPullsSkipped')} not pulled (the provider's connection had closed), ${sum('heldCardPullsDropped')} dropped (queue full), ${sum('heldCardPullFailures')} failed (${sum('heldCardPullTimeouts')} ran out of time, ${sum('heldCardPullsLost')} lost their stream or connection, ${sum('heldCardPullsInvalid')} answered with a card that did not verify, the rest refused; ${sum('heldCardPullRetries')} tried again later), ${sum('heldCardsServed')} handed out`)
    lines.push(announced('group processes, whole run', sum))
  }
  const records = (r.processes ?? []).filter(p => p.role === 'group' && p.peer_records !== undefined).map(p => p.peer_records ?? {})
  if (records.length > 0) {
    const sum = (k: string): number => records.reduce((n, x) => n + (x[k] ?? 0), 0)
    lines.push(`  receivers' peer records sent with handoffs (group processes): ${sum('taken')} taken, ${sum('notTaken')} not taken (no newer than the one held, or not the receiver's), ${sum('refused')} refused`)
  }
  const atRest = (what: string, q: Record<string, number> | undefined): void => {
    if (q !== undefined) lines.push(`  discovery at rest, ${what}: ${q.lookups ?? 0} lookups (${q.lookupWalks ?? 0} walked on), ${q.lookupAnswers ?? 0} answers (${q.connectedAnswers ?? 0} from connected contacts), ${q.fetchedCards ?? 0} cards fetched, ${q.heldCardsReceived ?? 0} from holders, ${q.empty ?? 0} found nothing, ${q.dials ?? 0} connections dialed; the machine's CPU ${((q.machine_busy ?? 0) * 100).toFixed(0)} % busy meanwhile (${((q.machine_busy_idle ?? 0) * 100).toFixed(0)} % just before, nothing asked${q.rest_wait_ms === undefined ? '' : `, after ${(q.rest_wait_ms / 1000).toFixed(0)} s waiting for ${q.rested === 1 ? 'the machine to rest' : 'a rest that did not come'}`}${q.unsettled === undefined ? '' : `; ${q.unsettled} started before the machine settled after the one before`})`)
  }
  atRest('no card cache', r.quiet_discovery)
  atRest('every card from its agent', r.quiet_fresh_discovery)
  return lines.join('\n')
}
