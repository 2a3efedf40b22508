/**
 * The second phase of a handoff, on the receiving side. The receiver creates
 * the successor run when asked (phase one), but starts it only once the
 * sender confirms, with the predecessor's committed handoff event that names
 * it (phase two). A successor that is not confirmed in time (the sender's
 * call timed out and it never committed, it died, or only the confirmation
 * was lost) is asked about (get_run on the predecessor): it starts if the
 * predecessor names it and the last event of the sender's log (fetched and
 * verified) hands the run to it, and is failed with HANDOFF_UNCONFIRMED if
 * the predecessor or that event does not, or if the sender could not be asked
 * HANDOFF_CONFIRM_ASKS_MAX times running. No run is left running that nobody
 * will ever hear about, and one lost packet does not end a task line whose
 * handoff was committed.
 */
import { HANDOFF_CONFIRM_TIMEOUT_MS } from '../constants.ts'
import { FAILURE_MESSAGE_MAX_CHARS, HANDOFF_CONFIRM_ASK_INTERVAL_MS, HANDOFF_CONFIRM_ASKS_MAX } from './constants.ts'
import { InvalidRequestError, InvalidTransitionError, UnauthorizedError, toAapError, unreached } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { verifyEventSync, type SignatureCache } from '../runlog/event.ts'
import { handoffTarget } from '../runlog/handoff.ts'
import type { AgentEvent, HandoffLink, Run } from '../runlog/types.ts'
import { cutText } from '../util/text.ts'

/** What the events service gives the confirmations (wired by the node). */
export interface ConfirmationPorts {
  /** Publish the event that confirmed a successor on the task's topic, so a holder of another handoff of the run learns of the fork (src/events/forks.ts). */
  spread: (handoffEvent: AgentEvent) => void
  /** The event at `seq` of a run as its executor's log holds it, verified; undefined when it holds none there; throws the sync's typed error. */
  eventFrom: (runId: string, seq: number) => Promise<AgentEvent | undefined>
}

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
  /** Between two asks of a sender that could not be asked (default HANDOFF_CONFIRM_ASK_INTERVAL_MS). */
  askIntervalMs?: number
}

/** Stats of the asks after a confirmation that did not come (tests, metrics). */
export interface ConfirmationStats {
  /** get_run asks made of a sender. */
  asks: number
  /** Successors started because the predecessor, asked, named them. */
  startedOnAsk: number
  /** Successors failed with HANDOFF_UNCONFIRMED. */
  failed: number
}

export class HandoffConfirmations {
  private readonly i: ConfirmationsInit
  private readonly waiting = new Map<string, Awaiting>()
  private readonly timeoutMs: number
  private readonly askIntervalMs: number
  readonly stats: ConfirmationStats = { asks: 0, startedOnAsk: 0, failed: 0 }
  private ports?: ConfirmationPorts

  constructor (init: ConfirmationsInit) {
    this.i = init
    this.timeoutMs = init.timeoutMs ?? HANDOFF_CONFIRM_TIMEOUT_MS
    this.askIntervalMs = init.askIntervalMs ?? HANDOFF_CONFIRM_ASK_INTERVAL_MS
  }

  /** The events service's part, wired by the node once both exist. */
  connect (ports: ConfirmationPorts): void {
    this.ports = ports
  }

  /** A successor was created and its handle is out: start it once the sender confirms. */
  expect (runId: string, from: HandoffLink, start: () => void): void {
    const w: Awaiting = { from, start, timer: setTimeout(() => { void this.ask(runId, w, 1) }, this.timeoutMs) }
    w.timer.unref?.()
    this.waiting.set(runId, w)
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
    if (still !== undefined) {
      this.started(runId, still)
      this.ports?.spread(e)
    }
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

  /**
   * No confirmation in time: ask the predecessor's executor. Its answer and
   * its log decide (start when the predecessor names this run and the last
   * event of its log hands the run here, fail otherwise); a
   * sender that cannot be asked (unreachable, or no answer in time) is asked
   * again HANDOFF_CONFIRM_ASK_INTERVAL_MS later, HANDOFF_CONFIRM_ASKS_MAX
   * times in all. A confirmation that arrives meanwhile starts the run as
   * usual, and this ask then leaves it alone, as it does after `stop()`.
   */
  private async ask (runId: string, w: Awaiting, attempt: number): Promise<void> {
    if (this.waiting.get(runId) !== w) return
    let why: string
    this.stats.asks++
    try {
      const pred = await this.i.getRemoteRun(w.from.run_id)
      if (this.waiting.get(runId) !== w) return
      if (pred.handoff_to?.run_id === runId) {
        // committed, but the confirmation was lost on the way. The sender's answer is its word; the run starts on
        // its signed handoff event, the last of its log (a sender that hands one run off twice would name each
        // receiver it is asked by), which is spread like a confirmation's. A sync that fails is the sender not
        // answering (asked again while asks are left), with its cause
        const e = await this.ports?.eventFrom(w.from.run_id, pred.last_seq)
        if (this.waiting.get(runId) !== w) return
        if (this.ports === undefined || (e !== undefined && handoffTarget(e)?.run_id === runId)) {
          this.stats.startedOnAsk++
          this.started(runId, w)
          if (e !== undefined) this.ports?.spread(e)
          return
        }
        why = `the sender named this run when asked, but the last event of its log (seq ${pred.last_seq}) ${e === undefined ? 'is not there' : 'does not hand the run to it'}`
      } else {
        why = `the predecessor ${pred.state === 'completed' ? 'was handed to another run' : `is ${pred.state}`}`
      }
    } catch (err) {
      if (this.waiting.get(runId) !== w) return
      const e = toAapError(err)
      why = `the sender did not confirm the handoff and cannot be asked: ${e.message}`
      if (unreached(e) && attempt < HANDOFF_CONFIRM_ASKS_MAX) {
        this.i.log.info({ run_id: runId, from: w.from.run_id, attempt, reason: e.details?.reason }, 'the sender of an unconfirmed handoff could not be asked; asking again')
        w.timer = setTimeout(() => { void this.ask(runId, w, attempt + 1) }, this.askIntervalMs)
        w.timer.unref?.()
        return
      }
    }
    this.waiting.delete(runId)
    this.stats.failed++
    this.i.log.warn({ run_id: runId, from: w.from.run_id, why, asks: attempt }, 'failing a handoff successor that was never confirmed')
    try {
      await this.i.fail(runId, cutText(why, FAILURE_MESSAGE_MAX_CHARS))
    } catch (err) {
      this.i.log.error({ err: toAapError(err), run_id: runId }, 'an unconfirmed handoff successor could not be failed')
    }
  }
}
