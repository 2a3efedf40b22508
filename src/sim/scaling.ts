/**
 * The scaling report (`npm run sim:scale`): one row of figures per mesh size
 * from that size's simulation report, whether each size kept every invariant,
 * how discover p50 grows against log N, and the Markdown page. Pure: reports
 * in, figures and text out.
 */
import { CONNECTION_GRACE_MS, CONNECTIONS_HEADROOM } from '../constants.ts'
import { SIM_SETTLE_MARGIN_MS } from './resources.ts'
import type { SimReport } from './report.ts'
import { f1, held, pp, QUIET_COLUMNS_NOTE, quietTable, roundTripLine, share } from './scaling-quiet.ts'
import { QUIET_DISCOVER_SERIES, QUIET_FIRST_CARD_SERIES, QUIET_ROUND_TRIP_SERIES, QUIET_FRESH_DISCOVER_SERIES, QUIET_FRESH_FIRST_CARD_SERIES, SIM_QUIET_MAX_BUSY, SIM_QUIET_SETTLE_MARGIN, SIM_QUIET_SETTLE_MAX_MS, SIM_QUIET_SETTLE_WINDOW_MS, SIM_QUIET_WAIT_MAX_MS } from './quiet-discover.ts'

const MIB = 2 ** 20

/** The most RSS per node the scaling target allows at 200 nodes (issue #17). */
export const SCALE_RSS_PER_NODE_TARGET_BYTES = 10 * 1000 * 1000

export interface Pcts { p50: number, p99: number, n: number }

/**
 * Connections per node against the budget (`bound`, CONNECTIONS_MAX unless
 * --max-connections): the budget prunes down to it, but a connection in its
 * grace period (CONNECTION_GRACE_MS) is not closed yet, and libp2p refuses
 * past `hard_limit` (bound + CONNECTIONS_HEADROOM). Under the bound: every
 * node at most `bound` at the end and never past `hard_limit`.
 */
export type ConnectionFigures = NonNullable<SimReport['connections']> & {
  hard_limit: number
  nodes_over_bound_at_end: number
  nodes_over_hard_limit: number
  /** Of those, the hostile nodes' (in the hostile group): an attacker's node runs whatever code it likes. */
  hostile_over_hard_limit?: number
  under_bound: boolean
}

function connectionFigures (r: SimReport): ConnectionFigures | undefined {
  const c = r.connections
  if (c === undefined) return undefined
  const hard = c.bound + CONNECTIONS_HEADROOM
  const procs = r.processes ?? []
  const overAtEnd = procs.flatMap(p => p.connections_end).filter(n => n > c.bound).length
  const overHard = procs.flatMap(p => p.connections_peak).filter(n => n > hard).length
  const hostile = procs.filter(p => p.role === 'hostile')
  const hostileOver = hostile.length === 0 ? {} : { hostile_over_hard_limit: hostile.flatMap(p => p.connections_peak).filter(n => n > hard).length }
  // nodes that were not measured (a group process that died) are not under the bound: nobody knows
  const measuredAll = measuredProblems(r).length === 0
  return { ...c, hard_limit: hard, nodes_over_bound_at_end: overAtEnd, nodes_over_hard_limit: overHard, ...hostileOver, under_bound: overAtEnd === 0 && overHard === 0 && measuredAll }
}

/**
 * Whether every node of the run was measured: the processes' figures (their
 * connections per node) cover as many nodes as the run had. Fewer means a
 * process gave no figures (a group that died, group.ts markGroupLost), and
 * the figures per node (RSS, connections) then speak for the survivors only.
 * A run with --processes measures only the driver's process by design (its
 * worker processes report no figures), so it is not held to this.
 */
export function measuredProblems (r: SimReport): string[] {
  if (r.config.processes === true) return []
  const measured = r.connections?.nodes ?? (r.processes ?? []).reduce((a, p) => a + p.nodes, 0)
  if (measured >= r.resources.nodes) return []
  const lost = Object.entries(r.incidents).filter(([k]) => k === 'group_lost' || k === 'group_hostile_lost').reduce((a, [, v]) => a + v, 0)
  return [`only ${measured} of ${r.resources.nodes} nodes measured${lost > 0 ? ` (${lost} group process${lost === 1 ? '' : 'es'} lost)` : ''}`]
}

export interface ScaleRow {
  nodes: number
  /** The commit the size ran from (absent in rows made before it was recorded). */
  commit?: string
  /** Whether the size ran to the end and kept every invariant. */
  passed: boolean
  /** Why it did not pass (empty when it did). */
  why: string[]
  wall_s: number
  processes: number
  /** Nodes each process hosted (the driver process first). */
  nodes_per_process: number[]
  invariants?: SimReport['invariants']
  connections?: ConnectionFigures
  /** Sum of every process's RSS at the end of the tasks, over the nodes. */
  rss_per_node_mib?: number
  /** The same less each process's RSS before it started nodes (loaded code): what the nodes themselves hold. */
  rss_per_node_above_start_mib?: number
  /** The group processes only (they host agents and nothing else): their RSS over their nodes. */
  group_rss_per_node_mib?: number
  heap_used_per_node_mib?: number
  /** V8 heap the processes hold (used or not) and memory outside it (buffers), per node. */
  heap_total_per_node_mib?: number
  external_per_node_mib?: number
  /** RSS and heap used per node after a full GC in every process (what the nodes hold, without garbage). */
  after_gc_rss_per_node_mib?: number
  after_gc_heap_per_node_mib?: number
  rss_peak_per_node_mib?: number
  cpu_cores_busy?: number
  /** Verified-signature caches, summed over processes (each shared by its process's nodes). */
  signatures?: { checked: number, hits: number }
  /** The worst process's event-loop delay. */
  loop_delay_ms?: { p99: number, max: number }
  discover?: Pcts
  /** What the task drivers' discovers asked of the DHT, per lookup (the work of a discover, apart from waiting for a loop). */
  discover_work?: DiscoverWork
  /** Discovers one after the other in the mesh at rest, after the tasks (src/sim/quiet-discover.ts). */
  quiet_discover?: Pcts
  quiet_first_card?: Pcts
  quiet_discover_work?: QuietWork
  /** The same, right after, with every card from its agent (`fresh`); rows before session 19 had only this, as quiet_discover. */
  quiet_fresh_discover?: Pcts
  quiet_fresh_first_card?: Pcts
  quiet_fresh_work?: QuietWork
  /** One round trip at rest before each of the first kind's discovers (QUIET_ROUND_TRIP_SERIES); absent before session 68. */
  quiet_round_trip?: Pcts
  delegate?: Pcts
  delivery?: Pcts
  first_event?: Pcts
  phases_s?: { start: number, announce: number, tasks: number, settle?: number }
}

export interface DiscoverWork {
  lookups: number
  /** DHT answers a lookup waited for (each one a request to a peer). */
  answers_per_lookup: number
  /** Lookups that went on to kad-dht's walk (the others ended with the connected round); absent in rows made before session 30. */
  walked_share?: number
  /** Providers those answers named. */
  providers_per_lookup: number
  /** Cards fetched from providers (each one a request to an agent). */
  cards_per_lookup: number
  /** Asks to the peer whose answer named providers (src/card/held-cards.ts), and the cards they brought. */
  held_asks_per_lookup: number
  held_cards_per_lookup: number
  /** Asks by key (the contacts asked for the key's cards at once); absent in rows made before session 70. */
  key_asks_per_lookup?: number
  /**
   * Of the cards holders sent, the share that came before any other source named its agent (fetch-order.ts
   * `backed`: the agent is then asked itself unless one does); absent before session 70.
   */
  unbacked_share?: number
  /** Cards that failed verification or named an agent not asked for (forged ones among them); absent before session 70. */
  rejected_per_lookup?: number
}

function discoverWork (d: Record<string, number> | undefined): DiscoverWork | undefined {
  const lookups = d?.lookups ?? 0
  if (d === undefined || lookups === 0) return undefined
  return {
    lookups,
    answers_per_lookup: (d.lookupAnswers ?? 0) / lookups,
    ...(d.lookupWalks === undefined ? {} : { walked_share: d.lookupWalks / lookups }),
    providers_per_lookup: (d.lookupProviders ?? 0) / lookups,
    cards_per_lookup: (d.fetchedCards ?? 0) / lookups,
    held_asks_per_lookup: (d.heldCardAsks ?? 0) / lookups,
    held_cards_per_lookup: (d.heldCardsReceived ?? 0) / lookups,
    ...(d.heldKeyAsks === undefined ? {} : { key_asks_per_lookup: d.heldKeyAsks / lookups }),
    ...(d.heldCardsUnbacked === undefined || (d.heldCardsReceived ?? 0) === 0 ? {} : { unbacked_share: d.heldCardsUnbacked / (d.heldCardsReceived ?? 1) }),
    ...(d.rejectedCards === undefined ? {} : { rejected_per_lookup: d.rejectedCards / lookups })
  }
}

export type QuietWork = DiscoverWork & {
  /** Round trips at rest that failed or timed out (QUIET_ROUND_TRIP_SERIES); absent before session 68. */
  round_trip_failures?: number
  empty: number
  machine_busy: number
  machine_busy_idle: number
  dials_per_lookup: number
  /** How long the phase first waited for the machine to rest (s), and whether it did; absent before session 30. */
  rest_wait_s?: number
  rested?: boolean
  /** Discovers that started before the machine had settled after the one before, and the mean wait for it (ms); absent before session 37. */
  unsettled?: number
  settle_ms?: number
}

function quietWork (d: Record<string, number> | undefined): QuietWork | undefined {
  const w = discoverWork(d)
  if (w === undefined) return undefined
  const rest = {
    ...(d?.rest_wait_ms === undefined ? {} : { rest_wait_s: d.rest_wait_ms / 1000, rested: d.rested === 1 }),
    ...(d?.unsettled === undefined ? {} : { unsettled: d.unsettled, settle_ms: d.settle_ms ?? 0 }),
    ...(d?.round_trip_failures === undefined ? {} : { round_trip_failures: d.round_trip_failures })
  }
  return { ...w, empty: d?.empty ?? 0, machine_busy: d?.machine_busy ?? 0, machine_busy_idle: d?.machine_busy_idle ?? 0, dials_per_lookup: (d?.dials ?? 0) / w.lookups, ...rest }
}

function pcts (r: SimReport, prefix: string): Pcts | undefined {
  const s = r.latency.find(l => l.name.startsWith(prefix))
  return s === undefined ? undefined : { p50: s.summary.p50, p99: s.summary.p99, n: s.summary.n }
}

/** Whether a report kept every invariant: no run lost, no forgery accepted (and some attempted, when it had hostile nodes), every trace meets the four contracts. */
export function invariantProblems (r: SimReport): string[] {
  const inv = r.invariants
  const out: string[] = []
  if (inv.runs_lost > 0) out.push(`${inv.runs_lost} of ${inv.runs_acknowledged} acknowledged runs lost`)
  if (inv.forged_accepted > 0) out.push(`${inv.forged_accepted} forged items accepted`)
  if (inv.traces_satisfying_contracts !== inv.tasks) out.push(`${inv.tasks - inv.traces_satisfying_contracts} of ${inv.tasks} traces broke a contract or did not finish`)
  // hostile nodes that attempted nothing (their group died, or they never forged) make "no forgery accepted" vacuous
  const hostileNodes = r.config.hostile_nodes
  if (typeof hostileNodes === 'number' && hostileNodes > 0 && inv.forged_attempted === 0) out.push(`${hostileNodes} hostile nodes attempted no forgery: nothing was tested`)
  return out
}

/** The first words of each failure's problems, counted: what made the tasks fail. */
export function failureKinds (r: SimReport, max = 5): string[] {
  const kinds = new Map<string, number>()
  for (const f of r.failures) {
    const p = (f.problems[0] ?? 'no problem recorded').replace(/12D3Koo\w+/g, '<agent>').replace(/task-\d+-\d+/g, '<task>').replace(/\b\d+(\.\d+)?\b/g, 'N').slice(0, 120)
    kinds.set(p, (kinds.get(p) ?? 0) + 1)
  }
  return [...kinds.entries()].sort((a, b) => b[1] - a[1]).slice(0, max).map(([k, n]) => `${n} × ${k}`)
}

export function scaleRow (r: SimReport): ScaleRow {
  const procs = r.processes ?? []
  const groups = procs.filter(p => p.role === 'group')
  const sum = (xs: number[]): number => xs.reduce((a, b) => a + b, 0)
  const n = r.resources.nodes
  const why = invariantProblems(r)
  if (why.length > 0) why.push(...failureKinds(r))
  why.push(...measuredProblems(r))
  return {
    nodes: n,
    ...(r.commit === undefined ? {} : { commit: r.commit }),
    passed: why.length === 0,
    why,
    wall_s: r.duration_ms / 1000,
    processes: Math.max(1, procs.length),
    nodes_per_process: procs.length > 0 ? procs.map(p => p.nodes) : [n],
    invariants: r.invariants,
    ...optional('connections', connectionFigures(r)),
    rss_per_node_mib: r.resources.rss_per_node_bytes / MIB,
    ...(procs.length === 0 ? {} : { rss_per_node_above_start_mib: sum(procs.map(p => p.rss_bytes - p.rss_start_bytes)) / n / MIB }),
    ...(groups.length === 0 ? {} : { group_rss_per_node_mib: sum(groups.map(p => p.rss_bytes)) / sum(groups.map(p => p.nodes)) / MIB }),
    heap_used_per_node_mib: r.resources.heap_used_bytes / n / MIB,
    ...(procs.length === 0
      ? {}
      : { heap_total_per_node_mib: sum(procs.map(p => p.heap_total_bytes)) / n / MIB, external_per_node_mib: sum(procs.map(p => p.external_bytes)) / n / MIB }),
    ...(procs.length === 0 || procs.some(p => p.after_gc === undefined)
      ? {}
      : {
          after_gc_rss_per_node_mib: sum(procs.map(p => p.after_gc?.rss_bytes ?? 0)) / n / MIB,
          after_gc_heap_per_node_mib: sum(procs.map(p => p.after_gc?.heap_used_bytes ?? 0)) / n / MIB
        }),
    rss_peak_per_node_mib: r.resources.rss_peak_bytes / n / MIB,
    cpu_cores_busy: r.resources.cpu_cores_busy,
    ...(procs.length === 0 || procs.some(p => p.signatures === undefined)
      ? {}
      : { signatures: { checked: sum(procs.map(p => p.signatures.checked)), hits: sum(procs.map(p => p.signatures.hits)) } }),
    loop_delay_ms: { p99: r.resources.event_loop_delay_ms.p99, max: r.resources.event_loop_delay_ms.max },
    ...optional('discover', pcts(r, 'discover')),
    ...optional('discover_work', discoverWork(r.discovery)),
    ...optional('quiet_discover', pcts(r, QUIET_DISCOVER_SERIES)),
    ...optional('quiet_first_card', pcts(r, QUIET_FIRST_CARD_SERIES)),
    ...optional('quiet_discover_work', quietWork(r.quiet_discovery)),
    ...optional('quiet_fresh_discover', pcts(r, QUIET_FRESH_DISCOVER_SERIES)),
    ...optional('quiet_fresh_first_card', pcts(r, QUIET_FRESH_FIRST_CARD_SERIES)),
    ...optional('quiet_fresh_work', quietWork(r.quiet_fresh_discovery)),
    ...optional('quiet_round_trip', pcts(r, QUIET_ROUND_TRIP_SERIES)),
    ...optional('delegate', pcts(r, 'delegate')),
    ...optional('delivery', pcts(r, 'event delivery')),
    ...optional('first_event', pcts(r, 'first event')),
    phases_s: { start: r.phases_ms.start / 1000, announce: r.phases_ms.announce / 1000, tasks: r.phases_ms.tasks / 1000, ...(r.phases_ms.settle === undefined ? {} : { settle: r.phases_ms.settle / 1000 }) }
  }
}

function optional<K extends string, V> (k: K, v: V | undefined): Partial<Record<K, V>> {
  return v === undefined ? {} : { [k]: v } as Record<K, V>
}

/** A size that did not produce a report (crashed, timed out): a failing row that says why. */
export function failedRow (nodes: number, wallMs: number, why: string): ScaleRow {
  return { nodes, passed: false, why: [why], wall_s: wallMs / 1000, processes: 0, nodes_per_process: [] }
}

export interface Growth {
  /** Smallest size with a discover figure: the reference. */
  base: number
  rows: Array<{ nodes: number, discover_ratio: number, log_ratio: number, within: boolean }>
  /** Discover p50 grew no faster than log N at every size. */
  within: boolean
}

/**
 * Discover p50 at each size over the smallest size's, against ln N over ln N
 * of the smallest: the tasks' discovers (`discover`) or those at rest (`quiet_discover`).
 */
export function discoverGrowth (rows: ScaleRow[], which: 'discover' | 'quiet_discover' | 'quiet_first_card' | 'quiet_round_trip' = 'discover'): Growth | undefined {
  const withDiscover = rows.filter(r => r[which] !== undefined && (r[which]?.n ?? 0) > 0 && (r[which]?.p50 ?? 0) > 0).sort((a, b) => a.nodes - b.nodes)
  const base = withDiscover[0]
  const b = base?.[which]?.p50
  if (base === undefined || b === undefined || withDiscover.length < 2) return undefined
  const out = withDiscover.slice(1).map(r => {
    const discoverRatio = (r[which]?.p50 ?? 0) / b
    const logRatio = Math.log(r.nodes) / Math.log(base.nodes)
    return { nodes: r.nodes, discover_ratio: discoverRatio, log_ratio: logRatio, within: discoverRatio <= logRatio }
  })
  return { base: base.nodes, rows: out, within: out.every(r => r.within) }
}

export interface ScalingDoc {
  command: string
  made_at: string
  machine: string
  per_process: number
  tasks: number
  /** The V8 flags (and environment) of the simulation's processes (src/sim/group.ts), when the report was made with some. */
  group_flags?: string[]
  rows: ScaleRow[]
  growth?: Growth
  /** The same for the discovers at rest after the tasks. */
  quiet_growth?: Growth
  /** Heap snapshot summaries, by size: the biggest kinds of objects by self size. */
  heap?: Array<{
    nodes: number
    process_nodes: number
    top: Array<{ what: string, mib: number, count: number }>
    /** Backing stores of `held_min_bytes` and more, by the objects that keep them alive. */
    held?: Array<{ chain: string, mib: number, count: number }>
    /** The smallest backing store `held` counts (64 KiB in reports made before it was recorded). */
    held_min_bytes?: number
  }>
}


/** The Markdown page: the command first, then per size every figure, then the checks of issue #17. */
export function renderScaling (d: ScalingDoc): string {
  const rows = [...d.rows].sort((a, b) => a.nodes - b.nodes)
  const inv = (r: ScaleRow, f: (i: NonNullable<ScaleRow['invariants']>) => string): string => r.invariants === undefined ? '–' : f(r.invariants)
  const lines = [
    '# Scaling report',
    '',
    `Made by \`${d.command}\` at ${d.made_at} on ${d.machine}.`,
    '',
    `Each size runs the Loops scenario of \`npm run sim\` with ${d.tasks} tasks. The agents are spread over group`,
    `processes of at most ${d.per_process} nodes (\`--per-process\`), each with its own event loop, and the hostile nodes`,
    'over a hostile group process; the driver process keeps the nodes that drive, observe and audit the tasks (which',
    'are agents too). Rows made before session 13 kept the hostile nodes in the driver process. All nodes talk',
    'over TCP loopback. Connections are counted on every node every second; RSS is each process\'s RSS at the end',
    'of the tasks (`process.memoryUsage().rss`), summed over the processes and divided by the nodes; "above start"',
    'subtracts each process\'s RSS before it started its nodes (the loaded code, about the same for one node or a',
    'hundred). Latencies include waits for the shared event loop of each process.',
    ...(d.group_flags === undefined || d.group_flags.length === 0 ? [] : ['', `The processes ran with ${d.group_flags.map(f => `\`${f}\``).join('; ')} (src/sim/group.ts).`]),
    '',
    '## Issue #17, point by point',
    '',
    ...checks(rows, d.growth, d.quiet_growth),
    '',
    '## Verdict per size',
    '',
    '| nodes | result | traces meeting the four contracts | runs lost | forged items accepted | events lost | wall | commit |',
    '|---:|---|---:|---:|---:|---:|---:|---|',
    ...rows.map(r => `| ${r.nodes} | ${r.passed ? 'passes' : `**fails**: ${r.why.join('; ')}`} | ${inv(r, i => `${i.traces_satisfying_contracts} / ${i.tasks}`)} | ${inv(r, i => `${i.runs_lost} of ${i.runs_acknowledged}`)} | ${inv(r, i => `${i.forged_accepted} of ${i.forged_attempted}`)} | ${inv(r, i => `${i.events_lost} of ${i.events_expected}`)} | ${f1(r.wall_s)} s | ${r.commit ?? 'unrecorded'} |`),
    '',
    '## Connections per node',
    '',
    `Counted on every node every second. The budget prunes each node down to the bound; a connection in its ${CONNECTION_GRACE_MS / 1000} s grace`,
    'period is not closed yet, so a node can be above the bound for a while. Past the hard limit (bound + headroom)',
    'libp2p refuses inbound connections, and the budget closes young connections that carry no query or request (since',
    'session 13; rows from before let them stand until their grace ended). The count at the end is taken',
    `once every node is back under the bound after the last task (waiting at most the grace and ${SIM_SETTLE_MARGIN_MS / 1000} s more).`,
    '',
    '| nodes | bound / hard limit | peak, max over nodes | peak, p50 over nodes | nodes above the bound at some sample | at the end, max | at the end, p50 | verdict |',
    '|---:|---:|---:|---:|---:|---:|---:|---|',
    ...rows.map(r => {
      const c = r.connections
      if (c === undefined) return `| ${r.nodes} | – | – | – | – | – | – | – |`
      const hostile = c.hostile_over_hard_limit === undefined || c.hostile_over_hard_limit === 0 ? '' : ` (${c.hostile_over_hard_limit} of them hostile)`
      const verdict = c.under_bound ? 'under the bound' : `**over**: ${c.nodes_over_bound_at_end} nodes above the bound at the end, ${c.nodes_over_hard_limit} past the hard limit${hostile}`
      return `| ${r.nodes} | ${c.bound} / ${c.hard_limit} | ${c.peak_max} | ${c.peak_p50} | ${c.nodes_over_bound} | ${c.end_max} | ${c.end_p50} | ${verdict} |`
    }),
    '',
    '## Memory per node (MiB)',
    '',
    '| nodes | processes (nodes each, driver first) | RSS per node | RSS per node above start | group processes\' RSS per node | heap used per node | V8 heap held per node | buffers outside the heap per node | after a full GC: RSS / heap used per node | peak RSS per node | CPU cores busy |',
    '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(r => `| ${r.nodes} | ${r.processes} (${r.nodes_per_process.join(', ')}) | ${f1(r.rss_per_node_mib)} | ${f1(r.rss_per_node_above_start_mib)} | ${f1(r.group_rss_per_node_mib)} | ${f1(r.heap_used_per_node_mib)} | ${f1(r.heap_total_per_node_mib)} | ${f1(r.external_per_node_mib)} | ${f1(r.after_gc_rss_per_node_mib)} / ${f1(r.after_gc_heap_per_node_mib)} | ${f1(r.rss_peak_per_node_mib)} | ${f1(r.cpu_cores_busy)} |`),
    '',
    `Target (issue #17): at most ${SCALE_RSS_PER_NODE_TARGET_BYTES / 1e6} MB (${f1(SCALE_RSS_PER_NODE_TARGET_BYTES / MIB)} MiB) RSS per node at 200 nodes.`,
    'RSS is mostly the V8 heap a process grew to and keeps (far more than it uses after a full GC) and buffers outside',
    'it (slabs of the Buffer pool, src/wire/buffer-pool.ts, and network reads: below); docs/simulations.md reads these figures.',
    'The live heap after a full GC is mostly connections: `npm run bench:memory` measures what a node holds by itself and',
    'what each connection adds (its streams, buffers and the event listeners libp2p keeps on them), so a node near its',
    'connection bound holds most of its live heap in connections (docs/simulations.md, session 29).',
    '',
    '## Latency (ms, p50 / p99)',
    '',
    '| nodes | discover | delegate round trip | event delivery | first event of a run | event-loop delay p99 / max (worst process) | phases: nodes up / announced / tasks (s) |',
    '|---:|---:|---:|---:|---:|---:|---|',
    ...rows.map(r => `| ${r.nodes} | ${pp(r.discover)} | ${pp(r.delegate)} | ${pp(r.delivery)} | ${pp(r.first_event)} | ${r.loop_delay_ms === undefined ? '–' : `${f1(r.loop_delay_ms.p99)} / ${f1(r.loop_delay_ms.max)}`} | ${r.phases_s === undefined ? '–' : `${f1(r.phases_s.start)} / ${f1(r.phases_s.announce)} / ${f1(r.phases_s.tasks)}`} |`),
    '',
    '## What the nodes of one process share',
    '',
    'The event loop and the CPU (see the delays above) and the loaded code (the "above start" column leaves it out), but',
    'not the verified-signature cache: each node has its own (`MeshNode.signatures`), so every node checks with Ed25519',
    'what it is sent the first time it meets it. Its hits are the same node meeting an event again (gossip and a sync,',
    'its own events come back):',
    '',
    '| nodes | Ed25519 checks | cache hits |',
    '|---:|---:|---:|',
    ...rows.map(r => `| ${r.nodes} | ${r.signatures?.checked ?? '–'} | ${r.signatures?.hits ?? '–'} |`),
    '',
    '## Discover p50 against log N',
    '',
    growthLine(d.growth),
    '',
    'What a discover asks of the mesh, per DHT lookup of the task drivers, beside its p50 and the worst event-loop delay',
    'of any process (the time a node waits for its loop on a machine whose two cores run every node):',
    '',
    '| nodes | lookups | DHT answers per lookup | lookups that walked | providers named per lookup | cards fetched per lookup | holder asks / cards from holders per lookup | discover p50 (ms) | event-loop delay p99 (ms) |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(r => {
      const w = r.discover_work
      return `| ${r.nodes} | ${w?.lookups ?? '–'} | ${f1(w?.answers_per_lookup)} | ${share(w?.walked_share)} | ${f1(w?.providers_per_lookup)} | ${f1(w?.cards_per_lookup)} | ${held(w)} | ${f1(r.discover?.p50)} | ${f1(r.loop_delay_ms?.p99)} |`
    }),
    '',
    workLine(rows),
    '',
    '### At rest',
    '',
    'After the tasks, once connections have settled, the nodes of the driver process run discovers one after the other',
    '(src/sim/quiet-discover.ts: the same query as a task driver\'s first attempt, none answered from the node\'s card cache,',
    'every card verified): first as a node that just started would (the peers whose DHT answers named providers send the',
    'cards they hold, src/card/held-cards.ts; the agents the rest), then with every card from its agent (`fresh`; the',
    'second table; before session 19 the only pass). Nothing else is asked of the mesh then, so a discover does not wait',
    'behind other tasks\' work, only behind its own requests and the mesh\'s upkeep. The machine\'s CPU is measured during the discovers and for a few seconds',
    'just before them, with nothing asked (the upkeep alone); connections dialed count those the discovering nodes opened',
    '(a lookup\'s peer or an agent they held no connection to). Since session 30 the phase first waits until the machine',
    `is at rest (its CPU busy ${SIM_QUIET_MAX_BUSY * 100} % or less over a second, ${SIM_QUIET_WAIT_MAX_MS / 1000} s at most; the column before last).`,
    'Since session 37 each discover also waits until the machine is back at rest after the one before (its CPU busy at',
    `most the upkeep just before plus ${SIM_QUIET_SETTLE_MARGIN * 100} points, over ${SIM_QUIET_SETTLE_WINDOW_MS} ms, ${SIM_QUIET_SETTLE_MAX_MS / 1000} s at most; the last column):`,
    'a discover\'s dials go on costing CPU after it returns, and the kinds take turns, so a discover had waited behind',
    `the work of the fresh one before it (3 agents dialed per discover at 500 nodes). Rows from before have no last column. ${QUIET_COLUMNS_NOTE}`,
    '',
    growthLine(d.quiet_growth, 'discover p50 at rest'),
    '',
    growthLine(discoverGrowth(rows, 'quiet_first_card'), 'first verified card at rest'),
    '',
    roundTripLine(rows),
    '',
    ...quietTable(rows, r => [r.quiet_discover, r.quiet_first_card, r.quiet_discover_work]),
    'Every card from its agent (`fresh`), right after:',
    '',
    ...quietTable(rows, r => r.quiet_fresh_discover === undefined ? [undefined, undefined, undefined] : [r.quiet_fresh_discover, r.quiet_fresh_first_card, r.quiet_fresh_work])
  ]
  for (const h of d.heap ?? []) {
    lines.push(`## Heap snapshot of one group process at ${h.nodes} nodes (${h.process_nodes} nodes in it)`, '',
      'Self size by kind of object (V8 heap snapshot; strings, arrays and code by type, objects by constructor):', '',
      '| what | MiB | count |', '|---|---:|---:|', ...h.top.map(t => `| ${t.what.replace(/\|/g, '\\|')} | ${f1(t.mib)} | ${t.count} |`), '')
    if (h.held !== undefined && h.held.length > 0) {
      const min = h.held_min_bytes ?? 64 * 1024
      lines.push(`Backing stores of ${min / 1024} KiB and more (Buffer pool slabs of Node, 64 KiB by default in Node 24, and socket reads among them), by what keeps them alive (retainers, nearest first):`, '',
        '| kept alive by | MiB | buffers |', '|---|---:|---:|', ...h.held.map(t => `| ${t.chain.replace(/\|/g, '\\|')} | ${f1(t.mib)} | ${t.count} |`), '')
    }
  }
  return `${lines.join('\n')}\n`
}

export function growthLine (g: Growth | undefined, what = 'discover p50'): string {
  if (g === undefined) return `Not enough sizes with ${what} figures to compare.`
  const parts = g.rows.map(r => `at ${r.nodes} nodes ${what} is ×${r.discover_ratio.toFixed(2)} of ${g.base} nodes' while ln N is ×${r.log_ratio.toFixed(2)} (${r.within ? 'within' : 'faster than log N'})`)
  return `${parts.join('; ')}. ${what[0]?.toUpperCase() ?? ''}${what.slice(1)} ${g.within ? 'grows no faster than log N' : 'grows faster than log N'} over these sizes.`
}

/** Whether the requests a discover makes (DHT answers and card fetches per lookup) grow no faster than log N. */
export function workLine (rows: ScaleRow[]): string {
  const w = rows.filter(r => r.discover_work !== undefined).sort((a, b) => a.nodes - b.nodes)
  const base = w[0]
  if (base?.discover_work === undefined || w.length < 2) return 'Not enough sizes with discovery counts to compare.'
  const requests = (r: ScaleRow): number => (r.discover_work?.answers_per_lookup ?? 0) + (r.discover_work?.cards_per_lookup ?? 0) + (r.discover_work?.held_asks_per_lookup ?? 0)
  const parts = w.slice(1).map(r => {
    const ratio = requests(r) / requests(base)
    const log = Math.log(r.nodes) / Math.log(base.nodes)
    return { nodes: r.nodes, ratio, within: ratio <= log, text: `×${ratio.toFixed(2)} at ${r.nodes} nodes (ln N ×${log.toFixed(2)})` }
  })
  const over = parts.filter(p => !p.within).map(p => p.nodes)
  return `Requests per lookup (DHT answers plus cards fetched) against ${base.nodes} nodes: ${parts.map(p => p.text).join(', ')}: ` +
    `${over.length === 0 ? 'no faster than log N; what grows faster is the time each request waits (compare the loop delay)' : `faster than log N at ${over.join(', ')} nodes`}.`
}

const verdict = (g: Growth | undefined): string => g === undefined ? 'not enough sizes' : g.within ? 'yes' : '**no**'

/** The four figures issue #17 asks for, each with its verdict over the sizes run. */
export function checks (rows: ScaleRow[], growth: Growth | undefined, quietGrowth?: Growth): string[] {
  const failing = rows.filter(r => !r.passed).map(r => r.nodes)
  const over = rows.filter(r => r.connections === undefined || !r.connections.under_bound).map(r => r.nodes)
  const honestOver = rows.filter(r => r.connections === undefined || r.connections.nodes_over_bound_at_end > 0 ||
    r.connections.nodes_over_hard_limit > (r.connections.hostile_over_hard_limit ?? 0)).map(r => r.nodes)
  const at200 = rows.find(r => r.nodes === 200)
  const mem = at200?.rss_per_node_mib
  const memOk = mem !== undefined && mem * MIB <= SCALE_RSS_PER_NODE_TARGET_BYTES
  return [
    `1. Every invariant (0 runs lost, 0 forgeries accepted, every trace meets the four contracts): ${failing.length === 0 ? 'yes, at every size' : `**no** at ${failing.join(', ')} nodes`}.`,
    `2. Connections per node under the bound: ${over.length === 0 ? 'yes, at every size' : `**no** (or not measured) at ${over.join(', ')} nodes`}` +
      `${over.length > 0 && honestOver.length === 0 ? '; every honest node was, at every size (the nodes past the hard limit are hostile ones)' : ''}.`,
    `3. RSS per node at 200 nodes ≤ 10 MB: ${mem === undefined ? 'not measured' : `${memOk ? 'yes' : '**no**'}, ${f1(mem)} MiB${at200?.after_gc_heap_per_node_mib === undefined ? '' : ` (${f1(at200.after_gc_heap_per_node_mib)} MiB of live heap after a full GC)`}`}${memOk || mem === undefined ? '' : '; what holds it up is below'}.`,
    `4. Discover p50 grows no faster than log N: during the tasks ${verdict(growth)}; in the mesh at rest ${verdict(quietGrowth)} (below).`
  ]
}
