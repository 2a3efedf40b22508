/**
 * Settling a liveness verdict this node signed as a run's delegator against
 * the executor's own log, once the executor is heard from again
 * (protocols/liveness.md). The executor's log is the run's: a verdict only
 * stands in for an executor that says nothing. So when the executor signed
 * events of its own from the verdict's seq on (it ended or moved the run
 * before it heard of the verdict), those events take the verdict's place in
 * this node's copy, for its subscribers and in its record of the run, and
 * are published again for the nodes that placed the verdict from gossip.
 */
import { LIVENESS_PROBE_TIMEOUT_MS } from '../constants.ts'
import { peerIdOfAgent } from '../identity/identity.ts'
import type { Logger } from '../logger.ts'
import { eventHash, executorOfRun } from '../runlog/event.ts'
import type { EventLog } from '../runlog/event-log.ts'
import type { AgentEvent } from '../runlog/types.ts'
import type { Placement } from './placement.ts'
import type { LocalRuns } from './ports.ts'
import type { SyncClient } from './sync.ts'
import type { CorrTrack } from './track.ts'

/** kept: the executor took the verdict as its own; superseded: its events replaced it; behind: its log ends before it. */
export type VerdictOutcome = 'kept' | 'superseded' | 'behind'

export interface VerdictSides {
  log: EventLog
  sync: SyncClient
  placement: Placement
  runs: LocalRuns
  logger: Logger
}

export async function reconcileVerdict (x: VerdictSides, t: CorrTrack, verdict: AgentEvent, signal?: AbortSignal): Promise<VerdictOutcome> {
  const runId = verdict.run_id
  const executor = peerIdOfAgent(executorOfRun(runId))
  const opts = { timeoutMs: LIVENESS_PROBE_TIMEOUT_MS, ...(signal === undefined ? {} : { signal }) }
  // the executor's log after the event the verdict followed, chained onto it (the sync client checks the link)
  const anchor = verdict.seq > 1 ? await x.log.get(runId, verdict.seq - 1) : undefined
  let theirs: AgentEvent[]
  if (anchor !== undefined && eventHash(anchor) === verdict.prev) {
    theirs = await x.sync.run(executor, runId, anchor, opts)
  } else {
    // the copy lost the verdict's predecessor: the whole log, checked at the verdict's link
    theirs = (await x.sync.run(executor, runId, undefined, opts)).filter(e => e.seq >= verdict.seq)
    if (theirs[0] !== undefined && theirs[0].prev !== verdict.prev) {
      x.logger.warn({ run_id: runId, seq: verdict.seq }, 'the executor\'s log differs from this node\'s copy before the verdict: the verdict stays')
      return 'kept'
    }
  }
  const first = theirs[0]
  if (first === undefined) return 'behind'
  if (eventHash(first) === eventHash(verdict)) return 'kept'
  await x.placement.ingest(t, theirs)
  x.placement.republish(t, theirs)
  // the record follows even when the run's correlation is not tracked as delegated here any more (a restart)
  await x.runs.delegatedEvents(theirs)
  x.logger.warn({ run_id: runId, seq: verdict.seq, executor_seq: theirs.at(-1)?.seq }, 'the executor had signed its own events where this node\'s verdict stands: they replace it')
  return 'superseded'
}
