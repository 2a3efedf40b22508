/**
 * One node's bound on the answers its responders hold for callers that have
 * not read them, over every served protocol, stream and peer together: the
 * request/response responders (responder.ts) and the artifact responder
 * (bulk.ts, since session 49: it held up to ~1.75 MiB per stream outside it).
 *
 * Each inbound stream holds at most RESPONDER_HELD_ANSWER_MAX_BYTES
 * (responder.ts hasRoom). That bounds one stream, not the node: every peer
 * may open MAX_INBOUND_STREAMS_PER_PROTOCOL streams of each protocol on each
 * connection, and peer ids cost nothing, so callers that ask for large
 * answers (events sync pages) and do not read could add up to gigabytes
 * until the streams' idle timers closed them. Past
 * RESPONDER_NODE_HELD_ANSWER_MAX_BYTES the node sheds: it aborts the streams
 * of the callers furthest behind until what is held is back under the bound:
 * first those whose answers wait for a drain, the one that has waited longest
 * first, then those that hold the most (a caller that read once and stopped
 * leaves its answers in the stream's buffer without a wait). A caller that
 * keeps reading holds little, and goes last.
 */
import type { Logger } from '../logger.ts'
import { RESPONDER_NODE_HELD_ANSWER_MAX_BYTES } from './network-constants.ts'

/** What the bound needs of one inbound stream. */
export interface AnswerHolder {
  /** Answer bytes queued for the stream and not passed on to the muxer yet. */
  readonly heldBytes: number
  /** How long the stream's answers have waited for the caller to read (0 while they do not wait). */
  readonly behindMs: number
  /** Abort the stream (its answers and requests go with it), saying why. */
  shed: (reason: string) => void
  /** For the log: the calling peer and the protocol. */
  readonly caller: string
  readonly protocol: string
  /**
   * The stream is closed, aborted or reset. Such a holder is dropped from the
   * count whatever its heldBytes say (a reset leaves the stream's write
   * buffer as it was), and an answer noted for it is not counted.
   */
  readonly gone?: boolean
}

export interface HeldAnswersStats {
  /** Streams aborted because the node held too much for callers that did not read. */
  shed: number
  /** Answer bytes those streams held when they were aborted. */
  shedBytes: number
}

export class HeldAnswers {
  readonly maxBytes: number
  readonly stats: HeldAnswersStats = { shed: 0, shedBytes: 0 }
  private readonly log: Logger
  /** Streams that held something when last told of; those found empty leave at the next count. */
  private readonly holders = new Set<AnswerHolder>()
  /**
   * At least what the holders hold: the last count plus every answer queued
   * since. Answers only leave (drain), so while this is under the bound the
   * node is too, and an answer costs no count of every stream.
   */
  private atMost = 0

  constructor (maxBytes: number, log: Logger) {
    this.maxBytes = maxBytes
    this.log = log
  }

  /** What the node's responders hold now. */
  get bytes (): number {
    let total = 0
    for (const h of this.holders) {
      if (h.gone === true) {
        this.holders.delete(h)
        continue
      }
      const held = h.heldBytes
      if (held === 0) this.holders.delete(h)
      total += held
    }
    this.atMost = total
    return total
  }

  /** Streams counted now (tests, metrics). */
  get streams (): number {
    return this.holders.size
  }

  /**
   * `h` queued an answer of `answerBytes`: past the bound, shed the callers
   * furthest behind (see above). Checked at once, so a burst of answers in
   * one turn cannot pass the bound by more than one answer. The streams are
   * counted only when the last count plus the answers since could pass the
   * bound, so a node far under it spends nothing per stream on an answer.
   */
  note (h: AnswerHolder, answerBytes: number): void {
    if (h.gone === true) {
      this.holders.delete(h)
      return
    }
    this.holders.add(h)
    this.atMost += answerBytes
    if (this.atMost <= this.maxBytes) return
    let total = this.bytes
    if (total <= this.maxBytes) return
    const behind = [...this.holders]
    behind.sort((a, b) => b.behindMs - a.behindMs || b.heldBytes - a.heldBytes)
    for (const x of behind) {
      if (total <= this.maxBytes) break
      const held = x.heldBytes
      total -= held
      this.holders.delete(x)
      this.stats.shed++
      this.stats.shedBytes += held
      this.log.warn({ peer: x.caller, protocol: x.protocol, held_bytes: held, behind_ms: x.behindMs, node_max_bytes: this.maxBytes },
        'a caller that did not read its answers was cut off: the node held too many unread answers')
      x.shed(`the node holds more than ${this.maxBytes} bytes of unread answers`)
    }
    this.atMost = total
  }

  /** The stream closed. */
  forget (h: AnswerHolder): void {
    this.holders.delete(h)
  }
}

const perNode = new WeakMap<object, HeldAnswers>()

/**
 * The bound of the node that `host` serves for, made at its first use. Keyed
 * by the host's peer id object, which a host wrapped for limited connections
 * (network.ts) shares with the host it wraps; a host without one is its own key.
 */
export function heldAnswersOf (host: object, log: Logger): HeldAnswers {
  const key: object = (host as { peerId?: object }).peerId ?? host
  let budget = perNode.get(key)
  if (budget === undefined) {
    budget = new HeldAnswers(RESPONDER_NODE_HELD_ANSWER_MAX_BYTES, log)
    perNode.set(key, budget)
  }
  return budget
}
