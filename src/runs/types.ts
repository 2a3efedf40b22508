/**
 * The run model's moving parts: who asks (Actor), what is asked (RunCommand)
 * and what a transition produces. The records themselves are in
 * src/runlog/types.ts.
 */
import type { AgentEventType, HandoffLink, Run, RunFailure } from '../runlog/types.ts'

/** Who is asking, as the node established it (Noise-authenticated PeerId or local caller). */
export type Actor =
  | { role: 'executor' }
  | { role: 'delegator', agent_id: string }
  | { role: 'authorized', agent_id: string }
  | { role: 'other', agent_id: string }

export type RunCommand =
  | { type: 'progress', payload: Record<string, unknown> }
  | { type: 'block', reason: string, checkpoint_id: string }
  | { type: 'resume', resolution: Record<string, unknown> }
  | { type: 'complete', output: Record<string, unknown> }
  | { type: 'fail', code: RunFailure['code'], message: string }
  | { type: 'cancel', reason: string }
  | { type: 'handoff', to: HandoffLink, context_digest?: string }

/** What a transition produces: the next run and the event that records it (unsigned, unsequenced). */
export interface TransitionResult {
  run: Run
  event: { type: AgentEventType, payload: Record<string, unknown> }
}
