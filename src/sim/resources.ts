/**
 * What one simulation process costs, and how many connections its nodes
 * hold: measured the same way in the driver process and in every group
 * process (group-worker.ts), so per-node figures add up across processes.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { ANNOUNCE_MAX_RETRIES, ANNOUNCE_RETRY_MS, DHT_PUT_TIMEOUT_MS } from '../constants.ts'
import { processSignatures, type SignatureCacheStats } from '../runlog/event.ts'
import type { SimNode } from './mesh.ts'
import type { SimReport } from './report.ts'

/** How often each node's open connections are counted. */
export const SIM_CONNECTION_SAMPLE_MS = 1000

/** One process of a simulation, measured at the end of its task phase. */
export interface ProcessFigures {
  role: 'driver' | 'group' | 'hostile'
  /** Nodes this process hosts (its RSS is divided by this). */
  nodes: number
  rss_bytes: number
  /** RSS when the meter started: after the modules were loaded, before this process started its nodes (the code, not the nodes). */
  rss_start_bytes: number
  /** Highest RSS of the process during the run (getrusage maxRSS). */
  rss_peak_bytes: number
  heap_used_bytes: number
  heap_total_bytes: number
  /**
   * After a full garbage collection (when the process runs with --expose-gc):
   * what the nodes hold, without the garbage and free heap pages the process
   * keeps from earlier phases.
   */
  after_gc?: { rss_bytes: number, heap_used_bytes: number, heap_total_bytes: number }
  external_bytes: number
  cpu_user_ms: number
  cpu_system_ms: number
  /** The DiscoveryStats of the process's nodes, summed over the whole run (a group process's holders among them). */
  discovery?: Record<string, number>
  /** What the process's nodes did with the peer records handoff requests carried (src/wire/peer-records.ts), summed. */
  peer_records?: Record<string, number>
  /** How late the process's one event loop (shared by its nodes) ran its timers. */
  event_loop_delay_ms: { p50: number, p99: number, max: number }
  /**
   * The process's verified-signature cache, which its nodes share (their
   * callers pass no cache of their own): Ed25519 checks made, and hits, of
   * which some are one node meeting another node's event (an upper bound on
   * what sharing saved).
   */
  signatures: SignatureCacheStats
  /** Per node: the most connections it held at any sample, and at the end. */
  connections_peak: number[]
  connections_end: number[]
}

/**
 * After the last task, how long past the budget's grace (CONNECTION_GRACE_MS)
 * the simulation waits at most for every node to be back under its bound
 * before it counts the connections at the end.
 */
export const SIM_SETTLE_MARGIN_MS = 15_000
/**
 * How long the simulation waits, after the tasks, for the announcements' retries to end (settleAnnouncements):
 * every retry's wait at its longest, and as many announcements at their longest.
 */
export const SIM_ANNOUNCE_SETTLE_MS = ANNOUNCE_RETRY_MS * (2 ** ANNOUNCE_MAX_RETRIES - 1) + (ANNOUNCE_MAX_RETRIES + 1) * DHT_PUT_TIMEOUT_MS

/**
 * Wait until no running node holds more connections than its budget allows,
 * or until `deadline` (ms since the epoch). True when every node is under
 * its bound. A node with more run peers than its bound stays over it (the
 * budget never cuts a live run), so the wait is bounded.
 */
export async function settleConnections (nodes: () => SimNode[], deadline: number): Promise<boolean> {
  return whileAny(nodes, n => n.node.host.getConnections().length > n.node.connections.max, deadline)
}

/** Check every SIM_CONNECTION_SAMPLE_MS until no running node is `busy`, or the deadline (false then). */
async function whileAny (nodes: () => SimNode[], busy: (n: SimNode) => boolean, deadline: number): Promise<boolean> {
  while (nodes().some(n => n.up && busy(n))) {
    if (Date.now() >= deadline) return false
    await new Promise(resolve => setTimeout(resolve, SIM_CONNECTION_SAMPLE_MS))
  }
  return true
}

/**
 * Wait until no node is announcing its card or waiting to walk short keys again (src/card/announce.ts), or the
 * deadline: the discovers at rest are measured once the announcements' retries are over, not beside them.
 */
export async function settleAnnouncements (nodes: () => SimNode[], deadline: number): Promise<boolean> {
  return whileAny(nodes, n => n.node.discovery.announcing, deadline)
}

/** Counts each node's open connections every SIM_CONNECTION_SAMPLE_MS and keeps each node's highest count. */
export class ConnectionSampler {
  private readonly peaks = new Map<SimNode, number>()
  /** Each node's count when the nodes were settled (markEnd), if they were. */
  private ended?: Map<SimNode, number>
  private readonly timer: ReturnType<typeof setInterval>
  private readonly nodes: () => SimNode[]

  constructor (nodes: () => SimNode[]) {
    this.nodes = nodes
    this.timer = setInterval(() => { this.sample() }, SIM_CONNECTION_SAMPLE_MS)
    this.timer.unref()
  }

  sample (): void {
    for (const n of this.nodes()) {
      if (!n.up) continue
      const open = n.node.host.getConnections().length
      if (open > (this.peaks.get(n) ?? 0)) this.peaks.set(n, open)
    }
  }

  /**
   * Take each node's count now as its count at the end: called when the nodes
   * settled after the last task (settleConnections), so connections opened
   * later (while other processes settle or report) do not count as the end.
   */
  markEnd (): void {
    this.sample()
    this.ended = new Map(this.nodes().map(n => [n, n.up ? n.node.host.getConnections().length : 0]))
  }

  /**
   * Stop sampling; per node (in `nodes()` order) the peak and the count at
   * the end (when markEnd was called, else now),
   * and the signature checks of the nodes' own caches (those of the nodes
   * that run now, plus the process's cache, which only code outside a node uses).
   */
  finish (): { peak: number[], end: number[], signatures: SignatureCacheStats } {
    this.sample()
    clearInterval(this.timer)
    const nodes = this.nodes()
    const signatures = { ...processSignatures.stats }
    for (const n of nodes) {
      const s = n.node.signatures.stats
      signatures.checked += s.checked
      signatures.hits += s.hits
      signatures.refused += s.refused
    }
    return {
      peak: nodes.map(n => this.peaks.get(n) ?? 0),
      end: nodes.map(n => this.ended?.get(n) ?? (n.up ? n.node.host.getConnections().length : 0)),
      signatures
    }
  }
}

/** CPU and event-loop delay since construction, memory now. */
export class ProcessMeter {
  private readonly cpu0 = process.cpuUsage()
  private readonly rss0 = process.memoryUsage().rss
  private readonly loop = monitorEventLoopDelay({ resolution: 10 })

  constructor () {
    this.loop.enable()
  }

  figures (role: ProcessFigures['role'], connections: { peak: number[], end: number[], signatures: SignatureCacheStats }): ProcessFigures {
    const mem = process.memoryUsage()
    const cpu = process.cpuUsage(this.cpu0)
    this.loop.disable()
    const ms = (ns: number): number => ns / 1e6
    const gc = Reflect.get(globalThis, 'gc') as (() => void) | undefined
    let afterGc: ProcessFigures['after_gc']
    if (typeof gc === 'function') {
      gc()
      gc()
      const m = process.memoryUsage()
      afterGc = { rss_bytes: m.rss, heap_used_bytes: m.heapUsed, heap_total_bytes: m.heapTotal }
    }
    return {
      role,
      nodes: connections.peak.length,
      rss_bytes: mem.rss,
      rss_start_bytes: this.rss0,
      // maxRSS is in KiB
      rss_peak_bytes: process.resourceUsage().maxRSS * 1024,
      heap_used_bytes: mem.heapUsed,
      heap_total_bytes: mem.heapTotal,
      external_bytes: mem.external,
      ...(afterGc === undefined ? {} : { after_gc: afterGc }),
      cpu_user_ms: cpu.user / 1000,
      cpu_system_ms: cpu.system / 1000,
      event_loop_delay_ms: { p50: ms(this.loop.percentile(50)), p99: ms(this.loop.percentile(99)), max: ms(this.loop.max) },
      signatures: connections.signatures,
      connections_peak: connections.peak,
      connections_end: connections.end
    }
  }
}

/** Middle value of a list (0 when empty). */
function median (xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.floor((s.length - 1) / 2)] ?? 0
}

/** Whole-simulation resources: the sum over its processes, per node over all of them; delays are the worst process's. */
export function resourcesOf (nodes: number, processes: ProcessFigures[], wallMs: number): SimReport['resources'] {
  const sum = (f: (p: ProcessFigures) => number): number => processes.reduce((a, p) => a + f(p), 0)
  const worst = (f: (p: ProcessFigures) => number): number => Math.max(0, ...processes.map(f))
  const cpu = sum(p => p.cpu_user_ms + p.cpu_system_ms)
  return {
    nodes,
    rss_bytes: sum(p => p.rss_bytes),
    rss_per_node_bytes: sum(p => p.rss_bytes) / nodes,
    rss_peak_bytes: sum(p => p.rss_peak_bytes),
    heap_used_bytes: sum(p => p.heap_used_bytes),
    cpu_user_ms: sum(p => p.cpu_user_ms),
    cpu_system_ms: sum(p => p.cpu_system_ms),
    cpu_cores_busy: cpu / wallMs,
    event_loop_delay_ms: {
      p50: worst(p => p.event_loop_delay_ms.p50),
      p99: worst(p => p.event_loop_delay_ms.p99),
      max: worst(p => p.event_loop_delay_ms.max)
    }
  }
}

/** Connections per node over every process, against the budget. */
export function connectionsOf (processes: ProcessFigures[], bound: number): NonNullable<SimReport['connections']> {
  const peak = processes.flatMap(p => p.connections_peak)
  const end = processes.flatMap(p => p.connections_end)
  return {
    bound,
    nodes: peak.length,
    peak_max: Math.max(0, ...peak),
    peak_p50: median(peak),
    end_max: Math.max(0, ...end),
    end_p50: median(end),
    nodes_over_bound: peak.filter(c => c > bound).length
  }
}
