/**
 * What the events service needs from the runs of its own node, and no more:
 * the node wires it to the run service (src/node.ts), so events never reaches
 * into runs.
 */
import type { AgentEvent, Run } from '../runlog/types.ts'

export interface LocalRuns {
  /** Every event this node commits for runs it executes, once it is durable. Returns the unsubscribe. */
  onEvent: (listener: (event: AgentEvent, run: Run) => void) => () => void
  /** The live runs this node executes (restart: they are followed again). */
  executing: () => AsyncIterable<Run>
  /** The delegator's records of live runs this node started elsewhere (restart, as above). */
  delegated: () => AsyncIterable<Run>
  /**
   * Verified events of a run this node delegated, in seq order, after they
   * are stored here: the delegator's record of the run follows them.
   */
  delegatedEvents: (events: AgentEvent[]) => Promise<void>
}
