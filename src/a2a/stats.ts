/**
 * The A2A counters of a node since it started, for its metrics
 * (src/api/metrics.ts: `aap_a2a_gateway`, `aap_a2a_outbound`). The node does
 * not own its A2A parts (the CLI and the local API make them), so their
 * counters are kept beside it, by node, as the relay client's are beside its
 * host (src/wire/host.ts). Every inbound server's agents (task-runs.ts) and
 * every outbound bridge (outbound.ts) of a node add to the same totals, so
 * they only grow while servers, agents and bridges come and go; each part
 * keeps its own counts too.
 */
import type { ProgressStats } from './outbound-bounds.ts'

/** The inbound gateway's task watches (task-runs.ts), all its servers and agents together. */
export interface A2aGatewayStats {
  /** Watches of tasks waiting for input dropped (past A2A_INPUT_WATCHES_MAX, or for a new task's follower). */
  watchesDropped: number
  /** Run events that could not be saved to their task. */
  saveErrors: number
  /** Watches that could not start. */
  watchErrors: number
  /** Subscriptions tried again because the run's correlation was busy on this node. */
  busyRetries: number
  /** Runs no longer followed after A2A_BUSY_RETRIES_MAX such tries: their tasks are read again when read (task-refresh.ts). */
  busyGaveUp: number
}

export function gatewayStats (): A2aGatewayStats {
  return { watchesDropped: 0, saveErrors: 0, watchErrors: 0, busyRetries: 0, busyGaveUp: 0 }
}

interface NodeTotals {
  gateway?: A2aGatewayStats
  outbound?: ProgressStats
}

const totals = new WeakMap<object, NodeTotals>()

function of (node: object): NodeTotals {
  let t = totals.get(node)
  if (t === undefined) {
    t = {}
    totals.set(node, t)
  }
  return t
}

/** The gateway totals of `node`, made (at zero) on first use: a node that serves A2A shows them from then on. */
export function gatewayTotals (node: object): A2aGatewayStats {
  const t = of(node)
  t.gateway ??= gatewayStats()
  return t.gateway
}

/** The outbound bridge totals of `node`, made (at zero) on first use. */
export function outboundTotals (node: object): ProgressStats {
  const t = of(node)
  t.outbound ??= { progressCut: 0, progressRefused: 0 }
  return t.outbound
}

/** What the node's A2A parts counted since start; a part the node never had is undefined. */
export function a2aStats (node: object): Readonly<NodeTotals> {
  return totals.get(node) ?? {}
}
