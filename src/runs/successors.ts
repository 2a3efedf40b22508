/**
 * A record of a run this node delegated that now names a successor (a
 * handoff its executor's handler made, or another authorized agent asked
 * for) brings the successor's record here too: the delegator of one is the
 * delegator of the other (protocols/handoff.md). The record that names it
 * was written with a mark (adoptions.ts); the mark goes once this settles,
 * and a start asks again after each successor still marked.
 */
import type { Logger } from '../logger.ts'
import { toAapError, unreached } from '../errors.ts'
import type { Run } from '../runlog/types.ts'
import { refusedAsClosed, refusedByStore } from '../storage/write-guard.ts'
import type { CallOptions } from '../wire/rpc.ts'
import type { RunCaller } from './caller.ts'
import { SUCCESSOR_ADOPTIONS_AT_START_MAX } from './constants.ts'
import type { RunStore } from './store.ts'

export interface SuccessorStats {
  /** Successors kept from a handoff's link alone (their executor not reached). */
  held: number
  /** Successors refused (their executor's answer is not a run continuing the handed-off one). */
  refused: number
  /** Successors asked after at a start: the node had stopped before it recorded them. */
  resumed: number
}

export interface SuccessorInit {
  store: RunStore
  caller: RunCaller
  log: Logger
  /** A successor is now recorded here too (the node follows it). */
  onSuccessor?: ((run: Run) => void) | undefined
}

export class Successors {
  readonly stats: SuccessorStats = { held: 0, refused: 0, resumed: 0 }
  private readonly i: SuccessorInit
  private unlisten: (() => void) | undefined
  private readonly stopping = new AbortController()
  private resuming: Promise<void> = Promise.resolve()

  constructor (init: SuccessorInit) {
    this.i = init
    this.unlisten = init.store.onOutgoing(run => {
      if (init.store.adoptions.names(run)) this.adopt(run, {})
    })
  }

  /** Ask after the successors still marked (the node stopped before it recorded them); in the background. */
  start (): void {
    this.resuming = this.resume().catch((err: unknown) => {
      this.i.log.error({ err: toAapError(err) }, 'the successors of runs handed off before the node stopped could not be looked for: they are looked for at the next start')
    })
  }

  async stop (): Promise<void> {
    this.unlisten?.()
    this.unlisten = undefined
    this.stopping.abort(new Error('node stopping'))
    await this.resuming
  }

  private async resume (): Promise<void> {
    const marks = await this.i.store.adoptions.pending(SUCCESSOR_ADOPTIONS_AT_START_MAX)
    for (const { successor, pred: predId } of marks) {
      if (this.stopping.signal.aborted) return
      const pred = await this.i.store.getOutgoing(predId)
      // the record no longer names this successor to record here: nothing to ask after
      if (pred === undefined || !this.i.store.adoptions.names(pred) || pred.handoff_to?.run_id !== successor) {
        await this.i.store.adoptions.settle(successor)
        continue
      }
      this.stats.resumed++
      await this.adopted(pred, { signal: this.stopping.signal })
    }
    if (marks.length > 0) this.i.log.info({ successors: marks.length }, 'asked after the successors of runs handed off before the node stopped')
  }

  private adopt (run: Run, opts: CallOptions): void {
    this.adopted(run, opts).catch((err: unknown) => {
      this.i.log.error({ err: toAapError(err), run_id: run.run_id, successor: run.handoff_to?.run_id }, 'the successor of a run handed off could not be recorded here: it is asked after again at the next start')
    })
  }

  /** Record the successor `run` names (adopted, held, or refused), then drop its mark. Rejects when it could not be recorded (the mark stays). */
  private async adopted (run: Run, opts: CallOptions): Promise<void> {
    const log = { run_id: run.run_id, successor: run.handoff_to?.run_id }
    let next: Run | undefined
    try {
      next = await this.i.caller.adoptSuccessor(run, opts)
    } catch (err) {
      const e = toAapError(err)
      // this node's disk refused the successor's record, or the node stopped under it: not an answer about the
      // successor (the mark stays for the next start)
      if (refusedByStore(e) || refusedAsClosed(e)) throw e
      if (!unreached(e)) {
        // its executor answered, and what it said is not a run continuing this one (a handoff naming another
        // task's run, a run of another delegator): nothing of it is recorded here, else liveness would watch
        // a run that is not this node's for as long as its executor answers
        this.stats.refused++
        this.i.log.warn({ err: e, ...log }, 'the successor a handoff names is not a run continuing it: not recorded here')
        // the record that staged the mark is committed before the mark goes (its write may still be queued: the
        // listener runs before it; a delete ahead of it left the mark for a run never recorded, held: true)
        await this.i.store.flushOutgoing()
        // and a write of that record made again later (one the disk refused) does not mark it again
        if (run.handoff_to !== null) await this.i.store.adoptions.refuse(run.run_id, run.handoff_to.run_id)
        return
      }
      // its executor could not be asked: a record from the handoff's link alone, which liveness watches
      // (else a successor whose executor then died would never end)
      this.i.log.warn({ err: e, ...log }, 'the successor of a run handed off could not be asked about: its record here is kept from the handoff until its executor answers')
      this.stats.held++
      next = await this.i.caller.holdSuccessor(run)
    }
    if (next !== undefined) this.i.onSuccessor?.(next)
    // the successor's record (this write's, or one written already) is durable before its mark goes
    await this.i.store.flushOutgoing()
    await this.settle(run)
  }

  private async settle (run: Run): Promise<void> {
    if (run.handoff_to !== null) await this.i.store.adoptions.settle(run.handoff_to.run_id)
  }
}
