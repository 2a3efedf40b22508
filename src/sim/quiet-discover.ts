/**
 * Discovers in a mesh at rest: after the tasks, once connections have
 * settled, the driver process's nodes run discovers one after the other
 * while nothing else is asked of the mesh. During the tasks every latency
 * includes the wait for event loops that N nodes share on the machine's
 * cores, which grows with N whatever the protocol does; here each discover
 * waits mostly for its own requests (DHT hops and card fetches), so its
 * growth with N is the protocol's. No discover answers from its node's card
 * cache: the first pass asks as a node that just started would (the peers
 * whose DHT answers named providers send the cards they hold, the agents the
 * rest: `cache: false`), the second asks every agent itself (`fresh`). Every
 * card is verified, and each goes through the scenario's forgery check.
 */
import { cpus } from 'node:os'
import type { Connection } from '@libp2p/interface'
import type { AgentCard, CapabilityRef } from '../card/card.ts'
import type { MeshNode } from '../node.ts'
import { diffStats, sumStats } from './discovery-figures.ts'
import { summarize, type LatencySeries } from './report.ts'

/** Discovers run at rest per simulation. */
export const SIM_QUIET_DISCOVERS = 40
/** Cards a quiet discover asks for: the task drivers' first attempt. */
export const SIM_QUIET_DISCOVER_LIMIT = 4
/** How long the machine's CPU is measured, before the discovers, with nothing asked of the mesh. */
export const SIM_QUIET_BASELINE_MS = 3000
/** The names of its series in a report (kept apart from the tasks' "discover ..." series). */
export const QUIET_DISCOVER_SERIES = 'quiet discover (mesh at rest, cards fetched and verified)'
export const QUIET_FIRST_CARD_SERIES = 'quiet first verified card (mesh at rest)'
export const QUIET_FRESH_DISCOVER_SERIES = 'quiet discover, every card from its agent (mesh at rest)'
export const QUIET_FRESH_FIRST_CARD_SERIES = 'quiet first verified card from its agent (mesh at rest)'

export interface QuietDiscovers {
  /** The whole discover (up to SIM_QUIET_DISCOVER_LIMIT cards), and its first verified card. */
  series: LatencySeries
  firstCard: LatencySeries
  /** Discovery counters the phase added on the nodes that ran it. */
  discovery: Record<string, number>
  /** Discovers that found no card (or failed). */
  empty: number
  /** The machine's CPU busy during the phase, 0 to 1 of all its cores. */
  machineBusy: number
  /** The same over SIM_QUIET_BASELINE_MS just before, with nothing asked of the mesh: its upkeep alone. */
  machineBusyIdle: number
  /** Connections the discovering nodes dialed during the phase (a lookup's peer or agent it held no connection to). */
  dials: number
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

export async function quietDiscovers (
  nodes: MeshNode[],
  capabilities: CapabilityRef[],
  opts: { count?: number, fresh?: boolean, pick: <T>(xs: T[]) => T, onCard: (card: AgentCard) => Promise<void> }
): Promise<QuietDiscovers> {
  // what the mesh's upkeep (gossip heartbeats, DHT refreshes, pings) costs the machine with nothing asked of it
  const idle0 = machineCpu()
  await new Promise(resolve => setTimeout(resolve, SIM_QUIET_BASELINE_MS))
  const idle1 = machineCpu()
  const fresh = opts.fresh === true
  const before = sumStats(nodes.map(n => n.discovery.stats))
  let dials = 0
  const onOpen = (evt: CustomEvent<Connection>): void => { if (evt.detail.direction === 'outbound') dials++ }
  for (const n of nodes) n.host.addEventListener('connection:open', onOpen)
  const cpu0 = machineCpu()
  const whole: number[] = []
  const first: number[] = []
  let empty = 0
  for (let i = 0; i < (opts.count ?? SIM_QUIET_DISCOVERS); i++) {
    const node = opts.pick(nodes)
    const query = { capability: opts.pick(capabilities) }
    const t0 = performance.now()
    const found: AgentCard[] = []
    try {
      for await (const card of node.discovery.discoverStream(query, { limit: SIM_QUIET_DISCOVER_LIMIT, ...(fresh ? { fresh } : { cache: false }) })) {
        if (found.length === 0) first.push(performance.now() - t0)
        found.push(card)
      }
    } catch {
      // a discover that fails (its time is up) counts as one that found nothing more, with the time it took
    }
    whole.push(performance.now() - t0)
    if (found.length === 0) empty++
    for (const c of found) await opts.onCard(c)
  }
  const cpu1 = machineCpu()
  for (const n of nodes) n.host.removeEventListener('connection:open', onOpen)
  const series = (name: string, samples: number[]): LatencySeries => ({ name, unit: 'ms', summary: summarize(samples), samples })
  return {
    series: series(fresh ? QUIET_FRESH_DISCOVER_SERIES : QUIET_DISCOVER_SERIES, whole),
    firstCard: series(fresh ? QUIET_FRESH_FIRST_CARD_SERIES : QUIET_FIRST_CARD_SERIES, first),
    discovery: diffStats(sumStats(nodes.map(n => n.discovery.stats)), before),
    empty,
    machineBusy: busyBetween(cpu0, cpu1),
    machineBusyIdle: busyBetween(idle0, idle1),
    dials
  }
}

/** The two passes: as a node that just started (holders may send cards), then every card from its agent. */
export async function quietDiscoverPasses (
  nodes: MeshNode[],
  capabilities: CapabilityRef[],
  opts: { count?: number, pick: <T>(xs: T[]) => T, onCard: (card: AgentCard) => Promise<void> }
): Promise<{ cold: QuietDiscovers, fresh: QuietDiscovers }> {
  const cold = await quietDiscovers(nodes, capabilities, opts)
  return { cold, fresh: await quietDiscovers(nodes, capabilities, { ...opts, fresh: true }) }
}

/** What a report keeps of a pass: its discovery counters and the phase's own figures. */
export function quietFigures (q: QuietDiscovers): Record<string, number> {
  return { ...q.discovery, empty: q.empty, machine_busy: q.machineBusy, machine_busy_idle: q.machineBusyIdle, dials: q.dials }
}
