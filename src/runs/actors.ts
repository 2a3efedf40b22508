/**
 * Who asks for a change of a run this node executes: the executor itself,
 * the run's delegator, an agent the delegator authorized, or anyone else
 * (the state machine decides what each may do).
 */
import type { Run } from '../runlog/types.ts'
import type { Actor } from './types.ts'

/** The executing node itself (its handlers, its own endings). */
export const EXECUTOR: Actor = { role: 'executor' }

/** The actor agent `peer` is on `run`. */
export function actorOf (run: Run, peer: string): Actor {
  if (peer === run.agent_id) return EXECUTOR
  if (peer === run.delegator) return { role: 'delegator', agent_id: peer }
  if (run.authorized.includes(peer)) return { role: 'authorized', agent_id: peer }
  return { role: 'other', agent_id: peer }
}
