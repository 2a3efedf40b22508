/**
 * The second phase of a handoff, on the receiving side. The receiver creates
 * the successor run when asked (phase one), but starts it only once the
 * sender confirms, with the predecessor's committed handoff event that names
 * it (phase two). A successor that is never confirmed (the sender's call
 * timed out and it never committed, or it died) is asked about once
 * (get_run on the predecessor) and then failed with HANDOFF_UNCONFIRMED:
 * no run is left running that nobody will ever hear about.
 */
import { HANDOFF_CONFIRM_TIMEOUT_MS } from '../constants.ts'
import { FAILURE_MESSAGE_MAX_CHARS } from './constants.ts'
import { InvalidRequestError, InvalidTransitionError, UnauthorizedError, toAapError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { verifyEventSync, type SignatureCache } from '../runlog/event.ts'
import { handoffTarget } from '../runlog/handoff.ts'
import type { HandoffLink, Run } from '../runlog/types.ts'
import { cutText } from '../util/text.ts'

interface Awaiting {
  from: HandoffLink
  start: () => void
  timer: ReturnType<typeof setTimeout>
}

export interface ConfirmationsInit {
  log: Logger
  /** The node's verified-signature cache (src/runlog/event.ts), shared with no other node. */
  signatures: SignatureCache
  /** The predecessor as its executor knows it now (get_run). */
  getRemoteRun: (runId: string) => Promise<Run>
  /** Fail a successor that was never confirmed. */
  fail: (runId: string, message: string) => Promise<void>
  timeoutMs?: number
}

export class HandoffConfirmations {
  private readonly i: ConfirmationsInit
  private readonly waiting = new Map<string, Awaiting>()
  private readonly timeoutMs: number

  constructor (init: ConfirmationsInit) {
    this.i = init
    this.timeoutMs = init.timeoutMs ?? HANDOFF_CONFIRM_TIMEOUT_MS
  }

  /** A successor was created and its handle is out: start it once the sender confirms. */
  expect (runId: string, from: HandoffLink, start: () => void): void {
    const timer = setTimeout(() => { void this.expire(runId) }, this.timeoutMs)
    timer.unref?.()
    this.waiting.set(runId, { from, start, timer })
  }

  /**
   * INVALID_TRANSITION (`reason: handoff_unconfirmed`) for a block or resume
   * of a successor still waiting for its sender's confirmation: its handler
   * has not started, and until it does the predecessor is the live run.
   */
  refuseUnconfirmed (runId: string, command: string, state: string): void {
    if (!this.waiting.has(runId)) return
    throw new InvalidTransitionError(`cannot ${command} run ${runId.slice(0, 160)}: it is a handoff successor its sender has not confirmed yet`, {
      run_id: runId.slice(0, 128), state, command, reason: 'handoff_unconfirmed'
    })
  }

  /**
   * Phase two from `peer`: the predecessor's handoff event naming `runId`.
   * A successor confirmed already (a retry) or ended is checked the same way
   * (against its record, `local`) and answered as it is: nothing starts, and
   * no one else learns anything from it.
   */
  async confirm (runId: string, handoffEvent: unknown, peer: string, local: () => Promise<Run>): Promise<Run> {
    const w = this.waiting.get(runId)
    const run = await local()
    const from = w?.from ?? run.handoff_from
    if (from === null || from === undefined) {
      throw new UnauthorizedError('this run continues no handoff: nobody confirms it', { reason: 'not_executor' })
    }
    const e = verifyEventSync(handoffEvent, this.i.signatures)
    if (e.executor !== peer || e.run_id !== from.run_id) {
      throw new UnauthorizedError('a handoff is confirmed by the executor of the run handed off, with that run\'s event', { reason: 'not_executor' })
    }
    if (handoffTarget(e)?.run_id !== runId) {
      throw new InvalidRequestError('the confirming event does not hand off to this run', { reason: 'not_named' })
    }
    // still waiting after the read (no retry started it meanwhile): start it now
    const still = this.waiting.get(runId)
    if (still !== undefined) this.started(runId, still)
    return run
  }

  /** Stop waiting (node stopping): nothing starts, the timers go. */
  stop (): void {
    for (const w of this.waiting.values()) clearTimeout(w.timer)
    this.waiting.clear()
  }

  private started (runId: string, w: Awaiting): void {
    clearTimeout(w.timer)
    this.waiting.delete(runId)
    w.start()
  }

  /** No confirmation in time: ask the predecessor's executor once, then fail the successor. */
  private async expire (runId: string): Promise<void> {
    const w = this.waiting.get(runId)
    if (w === undefined) return
    let why = 'the sender did not confirm the handoff'
    try {
      const pred = await this.i.getRemoteRun(w.from.run_id)
      if (pred.handoff_to?.run_id === runId) {
        // committed, but the confirmation was lost on the way
        this.started(runId, w)
        return
      }
      why = `the predecessor ${pred.state === 'completed' ? 'was handed to another run' : `is ${pred.state}`}`
    } catch (err) {
      why = `the sender did not confirm the handoff and cannot be asked: ${toAapError(err).message}`
    }
    this.waiting.delete(runId)
    this.i.log.warn({ run_id: runId, from: w.from.run_id, why }, 'failing a handoff successor that was never confirmed')
    try {
      await this.i.fail(runId, cutText(why, FAILURE_MESSAGE_MAX_CHARS))
    } catch (err) {
      this.i.log.error({ err: toAapError(err), run_id: runId }, 'an unconfirmed handoff successor could not be failed')
    }
  }
}
