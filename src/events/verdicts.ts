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
  /** Run the sync in one of the node's sync slots, within the executor's share (syncer.ts). */
  slot: <T>(agentId: string, fn: () => Promise<T>) => Promise<T>
}

/** Thrown from the sync's sink to stop reading: the first page decided the outcome. */
class Decided extends Error {}

/**
 * Each page of the executor's log is taken as it comes (verified, chained):
 * an executor that answers with a long log costs one page of memory, and a
 * page that fails later leaves the whole pages before it in place, as the
 * background syncs do.
 */
export async function reconcileVerdict (x: VerdictSides, t: CorrTrack, verdict: AgentEvent, signal?: AbortSignal): Promise<VerdictOutcome> {
  const runId = verdict.run_id
  const executorId = executorOfRun(runId)
  const executor = peerIdOfAgent(executorId)
  // the executor's log after the event the verdict followed, chained onto it (the sync client checks the link)
  const anchor = verdict.seq > 1 ? await x.log.get(runId, verdict.seq - 1) : undefined
  const anchored = anchor !== undefined && eventHash(anchor) === verdict.prev
  let outcome = 'behind' as VerdictOutcome
  let taken = 0
  const sink = async (page: AgentEvent[]): Promise<void> => {
    // without the anchor the whole log comes, checked at the verdict's link
    const theirs = anchored ? page : page.filter(e => e.seq >= verdict.seq)
    const first = theirs[0]
    if (first === undefined) return
    if (taken === 0) {
      if (!anchored && first.prev !== verdict.prev) {
        x.logger.warn({ run_id: runId, seq: verdict.seq }, 'the executor\'s log differs from this node\'s copy before the verdict: the verdict stays')
        outcome = 'kept'
        throw new Decided()
      }
      if (eventHash(first) === eventHash(verdict)) {
        outcome = 'kept'
        throw new Decided()
      }
      outcome = 'superseded'
    }
    await x.placement.ingest(t, theirs)
    x.placement.republish(t, theirs)
    // the record follows even when the run's correlation is not tracked as delegated here any more (a restart)
    await x.runs.delegatedEvents(theirs)
    taken += theirs.length
  }
  const opts = { timeoutMs: LIVENESS_PROBE_TIMEOUT_MS, sink, ...(signal === undefined ? {} : { signal }) }
  try {
    await x.slot(executorId, async () => x.sync.run(executor, runId, anchored ? anchor : undefined, opts))
  } catch (err) {
    if (!(err instanceof Decided)) {
      if (taken === 0) throw err
      // what came before the failing page stands; the tail syncs fetch the rest
      x.logger.warn({ err, run_id: runId, taken }, 'the executor\'s log after a verdict came in part: the pages before the failure replace the verdict')
    }
  }
  if (outcome === 'superseded') x.logger.warn({ run_id: runId, seq: verdict.seq, events: taken }, 'the executor had signed its own events where this node\'s verdict stands: they replace it')
  return outcome
}
