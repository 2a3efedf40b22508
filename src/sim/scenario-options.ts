/** What a simulation run is asked to do (runScenario, scenario.ts), and its defaults (`npm run sim`). */

export interface ScenarioOptions {
  nodes: number
  tasks: number
  /** Tasks in flight at once. */
  concurrency: number
  /** Nodes (besides the executors and the driver) that follow each task's events. */
  observers: number
  latencyMs: number
  jitterMs: number
  /** Share of nodes that behave hostile (0..0.5). */
  hostileShare: number
  churn: boolean
  /** Agents as separate node processes on TCP loopback (drivers, observers and hostile nodes stay here). */
  processes: boolean
  seed: number
  /** Connections each in-process node keeps open (libp2p's default otherwise). */
  maxConnections?: number
  /**
   * Spread the agents over group processes of at most this many nodes each
   * (group-worker.ts, TCP loopback), and the hostile nodes over a hostile
   * group process; this process keeps the drivers, observers and auditors
   * (which are agents too).
   */
  perProcess?: number
  /** Write a heap snapshot of the first group process here before stopping. */
  heapSnapshot?: string
  command: string
  /** How long one task may take before it counts as failed. */
  taskTimeoutMs: number
  /** Discovers of each kind in the mesh at rest after the tasks (default SIM_QUIET_DISCOVERS). */
  quietDiscovers?: number
  onProgress?: (line: string) => void
}

export const DEFAULT_SCENARIO: ScenarioOptions = {
  nodes: 20,
  tasks: 40,
  concurrency: 8,
  observers: 3,
  // @libp2p/memory applies its latency to each buffer in turn, which caps a
  // connection at one buffer per latency period: a slow link, not a delay.
  // Defaults keep it off; --latency models a constrained link.
  latencyMs: 0,
  jitterMs: 0,
  hostileShare: 0.1,
  churn: false,
  processes: false,
  seed: 1,
  command: 'npm run sim',
  taskTimeoutMs: 60_000
}
