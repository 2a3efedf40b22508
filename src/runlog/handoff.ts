/**
 * Reading handoffs out of a run's log: the predecessor's `run.completed`
 * with `transition: "handoff"` names the run that continues it.
 */
import type { AgentEvent, HandoffLink } from './types.ts'

function isRecord (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

export function isHandoffEvent (e: AgentEvent): boolean {
  return e.type === 'run.completed' && e.payload.transition === 'handoff'
}

/** The run that continues `e`'s run after a handoff, if `e` is a handoff completion. */
export function handoffTarget (e: AgentEvent): HandoffLink | null {
  if (!isHandoffEvent(e)) return null
  const to = e.payload.handoff_to
  return isRecord(to) && typeof to.run_id === 'string' && typeof to.agent_id === 'string' ? { run_id: to.run_id, agent_id: to.agent_id } : null
}

/** The run id a run's log hands off to (its last event, when that is a handoff), or undefined. */
export function handoffTargetOf (events: AgentEvent[]): string | undefined {
  const last = events.at(-1)
  return last === undefined ? undefined : handoffTarget(last)?.run_id
}
