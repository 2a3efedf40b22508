/**
 * The executor's side of liveness (protocols/liveness.md): a run whose
 * delegator declared this executor lost ends with that verdict, and a node
 * that restarts asks the delegators of the runs it was executing for a
 * verdict before it fails them itself. Either way the run ends failed and
 * its handler never runs again, so an executor that comes back cannot
 * complete a run it was declared lost on.
 */
import { LIVENESS_MAX_CONCURRENT_PROBES, LIVENESS_VERDICT_ASK_TIMEOUT_MS } from '../constants.ts'
import { FAILURE_MESSAGE_MAX_CHARS } from './constants.ts'
import { CapabilityNotSupportedError, InvalidRequestError, UnauthorizedError, toAapError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { eventHash, verifyEventSync, type SignatureCache } from '../runlog/event.ts'
import { isTerminal, type AgentEvent, type Run, type RunFailure } from '../runlog/types.ts'
import { assertDeclaredBy, EXECUTOR_LOST } from '../runlog/verdict.ts'
import { Limiter } from '../util/concurrency.ts'
import type { EventLog } from '../runlog/event-log.ts'
import type { CallOptions } from '../wire/rpc.ts'
import type { RunContext } from './types.ts'
import { cutText } from '../util/text.ts'
import { writeEnding } from './end-retry.ts'
import type { RunStore } from './store.ts'
import { isCorruptRecord, type CorruptRecordError } from '../storage/read.ts'

/** What recovery and verdicts use of the executor. */
export interface RecoverySide {
  log: Logger
  /** The node's verified-signature cache (src/runlog/event.ts), shared with no other node. */
  signatures: SignatureCache
  lock: <T>(runId: string, fn: () => Promise<T>) => Promise<T>
  localRun: (runId: string) => Promise<Run>
  /** The last event of the run's log here. */
  head: (runId: string) => Promise<AgentEvent | undefined>
  /** Commit `event` (signed by someone else) as the run's next event, with the run it leads to; under the lock. */
  commitForeign: (runId: string, event: AgentEvent, next: Run) => Promise<void>
  /** Fail the run with this node's own run.failed; under the lock. */
  failLocked: (runId: string, code: RunFailure['code'], message: string) => Promise<Run>
  /** Fail the run, taking its lock. */
  fail: (runId: string, code: RunFailure['code'], message: string) => Promise<Run>
  /** The verdict a run's delegator signed, or null (over /aap/control get_verdict). */
  verdictFrom: (delegator: string, runId: string, opts: CallOptions) => Promise<AgentEvent | null>
  stopping: AbortSignal
  /** The run is still running here (not ended, e.g. by its delegator's cancel, meanwhile). */
  isRunning: (runId: string) => boolean
  store: RunStore
  /** The run ended here without an event (endDamaged): its handler's signal aborts, its slot is freed. */
  release: (runId: string) => void
}

/**
 * A verdict on a run this node executes, from `peer`: the run ends failed
 * with EXECUTOR_LOST. When the log here still ends where the delegator's
 * view ended, the verdict itself becomes the run's last event (one chain
 * everywhere); when it moved on since, the run ends with this node's own
 * run.failed that names the verdict. A run already ended stays as it is.
 */
export async function adoptVerdict (x: RecoverySide, runId: string, raw: AgentEvent, peer: string): Promise<Run> {
  const verdict = verifyEventSync(raw, x.signatures)
  if (verdict.run_id !== runId) throw new InvalidRequestError('the verdict is on another run', { reason: 'bad_verdict' })
  return x.lock(runId, async () => {
    const run = await x.localRun(runId)
    if (peer !== run.delegator) throw new UnauthorizedError('only the run\'s delegator tells its executor it was declared lost', { reason: 'not_delegator' })
    assertDeclaredBy(verdict, run.delegator)
    // committed into this log as it is: an event of another correlation would break the log's chain check
    if (verdict.correlation_id !== run.correlation_id) throw new InvalidRequestError('the verdict names another correlation than its run', { reason: 'bad_verdict' })
    if (isTerminal(run.state)) return run
    const failure = verdict.payload.failure as { message?: unknown }
    const message = typeof failure.message === 'string' ? failure.message : 'declared lost by its delegator'
    const head = await x.head(runId)
    if (head !== undefined && verdict.seq === head.seq + 1 && verdict.prev === eventHash(head)) {
      const next: Run = { ...run, state: 'failed', failure: { code: EXECUTOR_LOST, message }, last_seq: verdict.seq, updated_at: new Date().toISOString() }
      await x.commitForeign(runId, verdict, next)
      x.log.warn({ run_id: runId, delegator: peer }, 'the delegator declared this executor lost on a run: the run ends failed with its verdict')
      return next
    }
    x.log.warn({ run_id: runId, delegator: peer, after_seq: verdict.seq - 1, head: head?.seq }, 'declared lost on a run whose log moved on since: ending it with a failure of its own')
    return x.failLocked(runId, EXECUTOR_LOST, cutText(`its delegator declared the executor lost after seq ${verdict.seq - 1}: ${message}`, FAILURE_MESSAGE_MAX_CHARS))
  })
}

/**
 * After a restart, runs that were executing cannot go on (their handlers'
 * memory is gone). Each one's delegator is asked for a verdict first, for at
 * most LIVENESS_VERDICT_ASK_TIMEOUT_MS; with one, the run ends with it, else
 * it fails with EXECUTOR_RESTARTED. A run that was blocked is asked about
 * too: its delegator may have declared this node lost while it was down, and
 * stopped offering the notice since (expired, or past its bound), so only
 * this ask ends it; without a verdict it stays blocked, for its resume,
 * unless its last event here is damaged (endIfDamagedHead).
 */
export async function settleInterrupted (x: RecoverySide, runs: Run[]): Promise<void> {
  const limiter = new Limiter(LIVENESS_MAX_CONCURRENT_PROBES)
  await Promise.all(runs.map(async run => limiter.run(async () => {
    if (x.stopping.aborted) return
    let verdict: AgentEvent | null = null
    try {
      verdict = await x.verdictFrom(run.delegator, run.run_id, { signal: x.stopping, callTimeoutMs: LIVENESS_VERDICT_ASK_TIMEOUT_MS })
    } catch (err) {
      x.log.info({ err: toAapError(err), run_id: run.run_id }, 'the delegator of an interrupted run could not be asked for a verdict')
    }
    if (x.stopping.aborted) return
    if (verdict !== null) {
      try {
        await adoptVerdict(x, run.run_id, verdict, run.delegator)
        return
      } catch (err) {
        x.log.warn({ err: toAapError(err), run_id: run.run_id }, 'a verdict from the delegator of an interrupted run could not be taken')
      }
    }
    if (run.state !== 'running') {
      await endIfDamagedHead(x, run)
      return
    }
    try {
      // a store refusing the write (a full disk) is tried again: else the run would stay running until the next restart
      const active = (): boolean => x.isRunning(run.run_id)
      const message = 'the executing node restarted while the run was executing'
      await writeEnding(async () => x.fail(run.run_id, 'EXECUTOR_RESTARTED', message).catch(async (err: unknown) => {
        if (!isCorruptRecord(err)) throw err
        return endDamaged(x, run.run_id, 'EXECUTOR_RESTARTED', message, err)
      }), { runId: run.run_id, active, signal: x.stopping, log: x.log })
    } catch (err) {
      const e = toAapError(err)
      // ended meanwhile by other means (its delegator's cancel, a handoff, a verdict that came first): nothing stays running
      if (e.code === 'INVALID_TRANSITION') x.log.info({ run_id: run.run_id, err: e }, 'a run interrupted by a restart had ended meanwhile')
      else x.log.error({ err: e, run_id: run.run_id }, 'a run interrupted by a restart could not be failed; it stays running')
    }
  })))
}

/**
 * A run whose last event here does not parse (a torn write, a disk fault)
 * takes no event: the next would chain to an event that is not there, and one
 * signed anew at its seq would fork the log its copies hold (src/events/forks.ts).
 * It ends failed in its record alone (its last_seq kept, so its delegator's
 * record follows the executor's answer), and its slot is freed. The damaged
 * event is never served: reading it is a CorruptRecordError.
 */
export async function endDamaged (x: RecoverySide, runId: string, code: RunFailure['code'], message: string, err: CorruptRecordError): Promise<Run> {
  return x.lock(runId, async () => {
    const run = await x.localRun(runId)
    if (isTerminal(run.state)) return run
    const failure = { code, message: cutText(`${message} (its last event here is damaged: the run ends in its record only)`, FAILURE_MESSAGE_MAX_CHARS) }
    const next: Run = { ...run, state: 'failed', failure, updated_at: new Date().toISOString() }
    await x.store.putRecord(next)
    x.release(runId)
    x.log.warn({ err, run_id: runId, key: err.key }, 'the last event of a run does not parse: the run ends failed in its record, with no event')
    return next
  })
}

/**
 * A run blocked across a restart whose last event here does not parse could
 * never be resumed or cancelled (each would chain an event to it, and fail
 * with corrupt_record for good, its slot held): it ends in its record alone,
 * as a running run with a damaged head does (endDamaged). A head that cannot
 * be read for another reason (a failing disk) leaves the run blocked, logged.
 */
async function endIfDamagedHead (x: RecoverySide, run: Run): Promise<void> {
  let damaged: CorruptRecordError
  try {
    await x.head(run.run_id)
    return
  } catch (err) {
    if (!isCorruptRecord(err)) {
      x.log.warn({ err: toAapError(err), run_id: run.run_id }, 'the last event of a run blocked across a restart could not be read: it stays blocked')
      return
    }
    damaged = err
  }
  try {
    // a store refusing the write is tried again; endDamaged reads the record again under the run's lock, so a run
    // ended meanwhile by other means is left as it is
    await writeEnding(async () => endDamaged(x, run.run_id, 'EXECUTOR_RESTARTED', 'the executing node restarted while the run was blocked', damaged),
      { runId: run.run_id, active: () => true, signal: x.stopping, log: x.log })
  } catch (err) {
    x.log.error({ err: toAapError(err), run_id: run.run_id }, 'a blocked run whose last event is damaged could not be ended; it stays blocked')
  }
}

/** What a run blocked across a restart starts again with, once resumed: its input and handoff context, from its run.started. */
export async function restoredStart (log: EventLog, run: Run): Promise<{ input: Record<string, unknown>, handoff: RunContext['handedOff'] }> {
  const started = await log.get(run.run_id, 1)
  const payload = started?.payload ?? {}
  const input = (payload.input ?? {}) as Record<string, unknown>
  const handoff = run.handoff_from === null ? null : { from: run.handoff_from, context: (payload.context ?? {}) as Record<string, unknown> }
  return { input, handoff }
}

/**
 * A resume starts the handler of a run blocked across a restart again: while
 * no handler serves its capability (an agent that reconnects to its node a
 * moment after the restart), the resume is refused, typed and retryable, and
 * the run stays blocked, instead of failing with no handler.
 */
export function assertResumable (run: Run, handled: boolean): void {
  if (handled) return
  throw new CapabilityNotSupportedError(`run ${run.run_id.slice(0, 160)} was blocked across a restart of its executor, and no handler serves ${run.capability.capability_id} there yet: it stays blocked; resume it again later`, { reason: 'no_handler', run_id: run.run_id.slice(0, 128) })
}

/**
 * The handler of a run blocked across a restart starts again, after its
 * resume, from its stored run.started. A start that cannot be read fails the
 * run (written again while the disk refuses it), so the run never stays
 * running with no handler and its slot held.
 */
export function restartResumed (x: RecoverySide, log: EventLog, run: Run, start: (restored: Awaited<ReturnType<typeof restoredStart>>) => void): void {
  restoredStart(log, run).then(start, async (err: unknown) => {
    x.log.warn({ err: toAapError(err), run_id: run.run_id }, 'a run resumed after a restart could not be handed to its handler: it fails')
    const message = `its start could not be read after a restart: ${toAapError(err).message}`
    await writeEnding(async () => x.fail(run.run_id, 'HANDLER_FAILED', cutText(message, FAILURE_MESSAGE_MAX_CHARS)), { runId: run.run_id, active: () => x.isRunning(run.run_id), signal: x.stopping, log: x.log })
  }).catch((err: unknown) => {
    x.log.error({ err: toAapError(err), run_id: run.run_id }, 'a resumed run whose start could not be read could not be failed either')
  })
}

/** What this node, as a run's delegator, says of it when asked (get_verdict). */
export interface DelegatorVerdict {
  /** The liveness verdict it signed on the run (null: none). */
  verdict: AgentEvent | null
  /** Its delegation of the run is still live here: a record it made as delegator, not ended (or a successor it has still to record). */
  held: boolean
}

/** The verdict and whether the delegation is held, for a run `self` delegated (orphans.ts asks). */
export async function verdictOn (store: RunStore, self: string, runId: string): Promise<DelegatorVerdict> {
  const record = await store.getOutgoing(runId)
  const verdict = await store.getVerdict(runId)
  // a successor of a run handed off that this node has still to record (adoptions.ts) is its delegation too
  const held = record === undefined ? await store.adoptions.marked(runId) : record.delegator === self && !isTerminal(record.state)
  // a verdict never stands on a live record: the executor's own word (its events, its answer) replaced it
  return { verdict: held ? null : verdict ?? null, held }
}
