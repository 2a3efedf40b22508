/**
 * What a replay collects before it rebuilds (service.ts replay): the
 * participants it knows or is told of are synced from, in rounds, within its
 * time; whoever did not answer is asked once more and named in the replay;
 * then every run the node holds under the id proves its place again from the
 * logs alone, and only the owner's task is replayed (protocols/events.md,
 * Replay).
 */
import { EVENTS_MAX_PARTICIPANTS, REPLAY_MAX_ROUNDS, REPLAY_TIMEOUT_MS } from '../constants.ts'
import { AapError, InvalidRequestError } from '../errors.ts'
import type { SignatureCache } from '../runlog/event.ts'
import { admitAll } from '../runlog/lineage.ts'
import type { AgentEvent } from '../runlog/types.ts'
import type { Correlations } from './correlations.ts'
import type { Forks } from './forks.ts'
import { addHints, untell, type Hints } from './hints.ts'
import { buildReplay, type CorrelationReplay } from './replay.ts'
import type { Syncer } from './syncer.ts'
import { vouchedParticipants, type CorrTrack, type RunTrack } from './track.ts'
import { untilAborted } from '../util/deadline.ts'

export interface ReplayDeps {
  /** This node's agent id: a root run it delegated makes the task its own. */
  self: string
  correlations: Correlations
  syncer: Syncer
  signatures: SignatureCache
  forks: Forks
  /** Every event this node holds for the correlation. */
  read: (correlationId: string) => Promise<Map<string, AgentEvent[]>>
  /** Take the owner the caller names (a typed error when the node follows another owner's task under the id). */
  claimOwner: (t: CorrTrack, owner: string | undefined) => void
}

/**
 * `p`, or a typed error at once when `signal` aborts first (its caller went
 * away: an API client gone, an MCP call canceled). The syncs it waits on go
 * on (they are the correlation's, bounded by the replay's deadline); the
 * replay, and the API slot it holds, do not wait for them. Not for the log
 * read: what it holds in memory is what the slot bounds.
 */
async function unlessCanceled<T> (p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  try {
    return await untilAborted(p, signal)
  } catch (err) {
    if (signal?.aborted !== true || err !== signal.reason) throw err
    throw canceled(signal)
  }
}

/** The typed error of `unlessCanceled` when `signal` has aborted by now (before the replay starts, or after a step not raced against it). */
function throwIfCanceled (signal: AbortSignal | undefined): void {
  if (signal?.aborted === true) throw canceled(signal)
}

function canceled (signal: AbortSignal): AapError {
  if (signal.reason instanceof AapError) return signal.reason
  return new InvalidRequestError('the replay was cancelled: its caller went away', { reason: 'cancelled' }, { cause: signal.reason })
}

export async function collectReplay (d: ReplayDeps, correlationId: string, hints: Hints, opts: { owner?: string, timeoutMs?: number, signal?: AbortSignal }): Promise<CorrelationReplay> {
  throwIfCanceled(opts.signal)
  const t = d.correlations.ensure(correlationId, false, false)
  t.holds++
  let told: RunTrack[] = []
  const since = Date.now()
  try {
    d.claimOwner(t, opts.owner)
    told = addHints(d.correlations, d.syncer, t, hints)
    for (const p of vouchedParticipants(t)) d.syncer.syncCorrelationFrom(t, p)
    d.syncer.refresh(t)
    const deadline = since + (opts.timeoutMs ?? REPLAY_TIMEOUT_MS)
    await unlessCanceled(d.syncer.awaitSyncs(t, deadline, REPLAY_MAX_ROUNDS), opts.signal)
    const unreached = await unlessCanceled(d.syncer.askUnreachedAgain(t, since, deadline), opts.signal)
    // the replay is the owner's task only: every run proves its place again, from the logs alone. The read is
    // not raced against the signal: it is local and bounded (REPLAY_MAX_BYTES), and a caller that went away
    // keeps its API slot until the read ends (else a canceled replay's read went on after its slot came back,
    // and reads in memory at once were no longer bounded by API_REPLAYS_CONCURRENT_MAX)
    const logs = await d.read(correlationId)
    throwIfCanceled(opts.signal)
    // an owner only judged here (the first root run placed) does not settle whose task a replay that names none is
    let admission = admitAll(logs, opts.owner ?? (t.ownerNamed === true ? t.owner : undefined), d.signatures)
    // a root run this node delegated makes the task its own (lineage.md, Owners), also once its track is gone
    if (admission.owner === undefined && admission.owners.includes(d.self)) admission = admitAll(logs, d.self, d.signatures)
    if (admission.owner === undefined && admission.owners.length > 1) {
      throw new InvalidRequestError(`${admission.owners.length} agents started tasks under ${correlationId}: name the owner`, { reason: 'ambiguous_owner', owners: admission.owners.slice(0, EVENTS_MAX_PARTICIPANTS) })
    }
    const mine = new Map([...logs].filter(([runId]) => admission.admitted.has(runId)))
    return buildReplay(correlationId, mine, { owner: admission.owner ?? null, rejected: admission.rejected, unreached, forks: d.forks.of(correlationId) })
  } finally {
    t.holds--
    untell(told)
    d.correlations.maybeUntrack(t)
  }
}
