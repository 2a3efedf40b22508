/**
 * Discovers in a mesh at rest: after the tasks, once connections have
 * settled, the driver process's nodes run discovers one after the other
 * while nothing else is asked of the mesh. During the tasks every latency
 * includes the wait for event loops that N nodes share on the machine's
 * cores, which grows with N whatever the protocol does; here each discover
 * waits mostly for its own requests (DHT hops and card fetches), so its
 * growth with N is the protocol's. No discover answers from its node's card
 * cache: one kind asks as a node that just started would (the peers whose
 * DHT answers named providers send the cards they hold, the agents the rest:
 * `cache: false`), the other asks every agent itself (`fresh`); they take
 * turns, each once the machine is back at rest after the one before
 * (SIM_QUIET_SETTLE_*). Every card is verified, and each goes through the
 * scenario's forgery check.
 */
import { cpus } from 'node:os'
import type { Connection } from '@libp2p/interface'
import type { AgentCard, CapabilityRef } from '../card/card.ts'
import type { MeshNode } from '../node.ts'
import { diffStats, sumStats } from './discovery-figures.ts'
import { groupQuiet, type Group } from './group.ts'
import type { SimNode } from './mesh.ts'
import { SIM_ANNOUNCE_SETTLE_MS, settleAnnouncements } from './resources.ts'
import { summarize, type LatencySeries } from './report.ts'

/**
 * Discovers run at rest per simulation, of each kind (ScenarioOptions.quietDiscovers). 40 until session 37: the
 * p50 of 40 moved by a third between runs of one size, as much as the growth it is compared with.
 */
export const SIM_QUIET_DISCOVERS = 100
/** Cards a quiet discover asks for: the task drivers' first attempt. */
export const SIM_QUIET_DISCOVER_LIMIT = 4
/** How long the machine's CPU is measured, before the discovers, with nothing asked of the mesh. */
export const SIM_QUIET_BASELINE_MS = 3000
/**
 * Before that, the phase waits until the machine is at rest: its CPU busy at most SIM_QUIET_MAX_BUSY over a
 * window of SIM_QUIET_WINDOW_MS, for SIM_QUIET_WAIT_MAX_MS at most. Work left over from the tasks (a burst of
 * DHT upkeep, say) had kept a 500-node machine 100 % busy through the baseline, and the discovers "at rest"
 * then waited behind it (session 30).
 */
export const SIM_QUIET_MAX_BUSY = 0.3
export const SIM_QUIET_WINDOW_MS = 1000
export const SIM_QUIET_WAIT_MAX_MS = 60_000
/**
 * Before each discover, the machine's CPU must be back at rest too: busy at
 * most the upkeep measured just before the phase plus SIM_QUIET_SETTLE_MARGIN,
 * over a window of SIM_QUIET_SETTLE_WINDOW_MS, for SIM_QUIET_SETTLE_MAX_MS at
 * most (a discover that starts without it is counted, `unsettled`). The two
 * kinds take turns, and a discover's dials go on costing both nodes CPU after
 * it returns (identify both ways, the routing table, the budget's prune): at
 * 500 nodes the fresh kind dialed 3 agents per discover and the next discover,
 * "at rest", waited behind that work (session 37).
 */
export const SIM_QUIET_SETTLE_MARGIN = 0.1
export const SIM_QUIET_SETTLE_WINDOW_MS = 200
export const SIM_QUIET_SETTLE_MAX_MS = 3000
/** The names of its series in a report (kept apart from the tasks' "discover ..." series). */
export const QUIET_DISCOVER_SERIES = 'quiet discover (mesh at rest, cards fetched and verified)'
export const QUIET_FIRST_CARD_SERIES = 'quiet first verified card (mesh at rest)'
export const QUIET_FRESH_DISCOVER_SERIES = 'quiet discover, every card from its agent (mesh at rest)'
export const QUIET_FRESH_FIRST_CARD_SERIES = 'quiet first verified card from its agent (mesh at rest)'
/**
 * One round trip at rest: before each discover of the first kind, once the machine has settled, the discovering
 * node pings a peer it holds a connection to (a stream opened and one echo, as a request to a contact costs). The
 * machine's share of a discover's growth with N: 500 nodes share its two cores, and every hop waits for them.
 */
export const QUIET_ROUND_TRIP_SERIES = 'quiet round trip, a ping to a connected peer (mesh at rest)'
/** How long such a ping may take; one that fails or takes longer is counted (`round_trip_failures`), not timed. */
export const SIM_QUIET_PING_TIMEOUT_MS = 5000

export interface QuietDiscovers {
  /** The whole discover (up to SIM_QUIET_DISCOVER_LIMIT cards), and its first verified card. */
  series: LatencySeries
  firstCard: LatencySeries
  /** One round trip to a connected peer before each discover (QUIET_ROUND_TRIP_SERIES; the first kind only, else empty). */
  roundTrip: LatencySeries
  /** Discovery counters the phase added on the nodes that ran it. */
  discovery: Record<string, number>
  /** Discovers that found no card (or failed). */
  empty: number
  /** The machine's CPU busy during the phase, 0 to 1 of all its cores. */
  machineBusy: number
  /** The same over SIM_QUIET_BASELINE_MS just before, with nothing asked of the mesh: its upkeep alone. */
  machineBusyIdle: number
  /** How long the phase waited for the machine to be at rest first (ms), and whether it was by then. */
  restWaitMs: number
  rested: boolean
  /** Connections the discovering nodes dialed during the phase (a lookup's peer or agent it held no connection to). */
  dials: number
  /** Discovers that started before the machine had settled (SIM_QUIET_SETTLE_MAX_MS ran out), and the mean wait for it (ms). */
  unsettled: number
  settleMs: number
}

/**
 * Wait until no node (here or in a group process) is announcing or about to
 * walk short provider keys again (SIM_ANNOUNCE_SETTLE_MS at most): those
 * walks are the mesh's start, not its rest. Returns how long it waited (ms).
 */
export async function quietAfterAnnouncements (here: SimNode[], groups: Group[], log: (line: string) => void): Promise<number> {
  const started = Date.now()
  const deadline = started + SIM_ANNOUNCE_SETTLE_MS
  const quiet = await Promise.all([settleAnnouncements(() => here, deadline), ...groups.map(async g => groupQuiet(g, Math.max(0, deadline - Date.now())))])
  if (quiet.includes(false)) log(`announcements: some node still announcing ${Math.round(SIM_ANNOUNCE_SETTLE_MS / 1000)} s after the connections settled`)
  return Date.now() - started
}

/** Busy and total CPU time of the machine so far (all cores). */
function machineCpu (): { busy: number, total: number } {
  let busy = 0
  let total = 0
  for (const c of cpus()) {
    const t = c.times.user + c.times.nice + c.times.sys + c.times.irq
    busy += t
    total += t + c.times.idle
  }
  return { busy, total }
}

function busyBetween (a: { busy: number, total: number }, b: { busy: number, total: number }): number {
  return b.total > a.total ? (b.busy - a.busy) / (b.total - a.total) : 0
}

/**
 * Wait until the machine's CPU is busy at most `busy` (0 to 1 of all its cores) over a window of `windowMs`, for
 * `maxMs` at most: how long it took, and whether it was.
 */
async function machineQuiet (busy: number, windowMs: number, maxMs: number): Promise<{ ms: number, quiet: boolean }> {
  const started = Date.now()
  while (true) {
    const a = machineCpu()
    await new Promise(resolve => setTimeout(resolve, windowMs))
    if (busyBetween(a, machineCpu()) <= busy) return { ms: Date.now() - started, quiet: true }
    if (Date.now() - started >= maxMs) return { ms: Date.now() - started, quiet: false }
  }
}

/** What one kind of discover at rest added up to, while it is measured. */
class Pass {
  readonly whole: number[] = []
  readonly first: number[] = []
  readonly roundTrip: number[] = []
  roundTripFailures = 0
  empty = 0
  dials = 0
  unsettled = 0
  settleMs = 0
  cpu = { busy: 0, total: 0 }
  stats: Record<string, number> = {}
  readonly fresh: boolean

  constructor (fresh: boolean) { this.fresh = fresh }

  result (idle: number, rest: { ms: number, rested: boolean }): QuietDiscovers {
    const series = (name: string, samples: number[]): LatencySeries => ({ name, unit: 'ms', summary: summarize(samples), samples })
    return {
      series: series(this.fresh ? QUIET_FRESH_DISCOVER_SERIES : QUIET_DISCOVER_SERIES, this.whole),
      firstCard: series(this.fresh ? QUIET_FRESH_FIRST_CARD_SERIES : QUIET_FIRST_CARD_SERIES, this.first),
      roundTrip: series(QUIET_ROUND_TRIP_SERIES, this.roundTrip),
      discovery: { ...this.stats, ...(this.fresh ? {} : { round_trip_failures: this.roundTripFailures }) },
      empty: this.empty,
      machineBusy: this.cpu.total > 0 ? this.cpu.busy / this.cpu.total : 0,
      machineBusyIdle: idle,
      restWaitMs: rest.ms,
      rested: rest.rested,
      dials: this.dials,
      unsettled: this.unsettled,
      settleMs: this.whole.length > 0 ? this.settleMs / this.whole.length : 0
    }
  }
}

/**
 * The two kinds, taking turns (so neither finds only the connections the
 * other opened): as a node that just started (holders may send cards), and
 * every card from its agent (`fresh`); `count` of each.
 */
export async function quietDiscoverPasses (
  nodes: MeshNode[],
  capabilities: CapabilityRef[],
  opts: { count?: number, pick: <T>(xs: T[]) => T, onCard: (card: AgentCard) => Promise<void> }
): Promise<{ cold: QuietDiscovers, fresh: QuietDiscovers }> {
  const atRest = await machineQuiet(SIM_QUIET_MAX_BUSY, SIM_QUIET_WINDOW_MS, SIM_QUIET_WAIT_MAX_MS)
  const rest = { ms: atRest.ms, rested: atRest.quiet }
  // what the mesh's upkeep (gossip heartbeats, DHT refreshes, pings) costs the machine with nothing asked of it
  const idle0 = machineCpu()
  await new Promise(resolve => setTimeout(resolve, SIM_QUIET_BASELINE_MS))
  const idle = busyBetween(idle0, machineCpu())
  let dials = 0
  const onOpen = (evt: CustomEvent<Connection>): void => { if (evt.detail.direction === 'outbound') dials++ }
  for (const n of nodes) n.host.addEventListener('connection:open', onOpen)
  const passes = [new Pass(false), new Pass(true)] as const
  try {
    for (let i = 0; i < 2 * (opts.count ?? SIM_QUIET_DISCOVERS); i++) {
      const pass = passes[i % 2]!
      const settle = await machineQuiet(idle + SIM_QUIET_SETTLE_MARGIN, SIM_QUIET_SETTLE_WINDOW_MS, SIM_QUIET_SETTLE_MAX_MS)
      pass.settleMs += settle.ms
      if (!settle.quiet) pass.unsettled++
      const node = opts.pick(nodes)
      const query = { capability: opts.pick(capabilities) }
      if (!pass.fresh) await roundTrip(node, pass, opts.pick)
      const before = sumStats(nodes.map(n => n.discovery.stats))
      const dials0 = dials
      const cpu0 = machineCpu()
      const t0 = performance.now()
      const found: AgentCard[] = []
      try {
        for await (const card of node.discovery.discoverStream(query, { limit: SIM_QUIET_DISCOVER_LIMIT, ...(pass.fresh ? { fresh: true } : { cache: false }) })) {
          if (found.length === 0) pass.first.push(performance.now() - t0)
          found.push(card)
        }
      } catch {
        // a discover that fails (its time is up) counts as one that found nothing more, with the time it took
      }
      pass.whole.push(performance.now() - t0)
      const cpu1 = machineCpu()
      pass.cpu = { busy: pass.cpu.busy + cpu1.busy - cpu0.busy, total: pass.cpu.total + cpu1.total - cpu0.total }
      pass.dials += dials - dials0
      for (const [k, v] of Object.entries(diffStats(sumStats(nodes.map(n => n.discovery.stats)), before))) pass.stats[k] = (pass.stats[k] ?? 0) + v
      if (found.length === 0) pass.empty++
      for (const c of found) await opts.onCard(c)
    }
  } finally {
    for (const n of nodes) n.host.removeEventListener('connection:open', onOpen)
  }
  return { cold: passes[0].result(idle, rest), fresh: passes[1].result(idle, rest) }
}

/** Ping a peer `node` holds a connection to, timed into `pass.roundTrip` (a failure is counted). */
async function roundTrip (node: MeshNode, pass: Pass, pick: <T>(xs: T[]) => T): Promise<void> {
  const open = node.host.getConnections().filter(c => c.status === 'open')
  if (open.length === 0) {
    pass.roundTripFailures++
    return
  }
  const t0 = performance.now()
  try {
    await node.host.services.ping.ping(pick(open).remotePeer, { signal: AbortSignal.timeout(SIM_QUIET_PING_TIMEOUT_MS) })
    pass.roundTrip.push(performance.now() - t0)
  } catch {
    // counted, and the report prints the count beside the figure: a ping refused or timed out has no round trip
    pass.roundTripFailures++
  }
}

/** What a report keeps of a pass: its discovery counters and the phase's own figures. */
export function quietFigures (q: QuietDiscovers): Record<string, number> {
  return { ...q.discovery, empty: q.empty, machine_busy: q.machineBusy, machine_busy_idle: q.machineBusyIdle, dials: q.dials, rest_wait_ms: q.restWaitMs, rested: q.rested ? 1 : 0, unsettled: q.unsettled, settle_ms: q.settleMs }
}
