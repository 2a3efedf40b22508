/**
 * A bound on how many of some kind of work the API does at once: its SSE
 * streams (API_MAX_SSE_CLIENTS, sse.ts) and its replays and timelines
 * (API_REPLAYS_CONCURRENT_MAX, answers.ts). The one place slots are counted:
 * each kind had its own copy.
 */
import type { ServerResponse } from 'node:http'
import type { HttpError } from './errors.ts'

export class Slots {
  private readonly max: number
  private readonly refusal: (max: number) => HttpError
  private held = 0

  /** `refusal` is what a take past `max` throws (a 429 with the kind's reason). */
  constructor (max: number, refusal: (max: number) => HttpError) {
    this.max = max
    this.refusal = refusal
  }

  /** Slots held now. */
  get taken (): number {
    return this.held
  }

  /**
   * Take a slot (or throw the refusal). The returned function gives it back;
   * calling it again does nothing. With `res`, the slot is kept until `res`
   * has closed as well (sent, or its client gone; at once if it already has):
   * an answer's text stays in memory until its socket took it.
   */
  take (res?: ServerResponse): () => void {
    if (this.held >= this.max) throw this.refusal(this.max)
    this.held++
    let holds = 1
    const drop = (): void => {
      if (--holds === 0) this.held--
    }
    if (res !== undefined && !res.closed && !res.destroyed) {
      holds++
      res.once('close', drop)
    }
    let released = false
    return () => {
      if (released) return
      released = true
      drop()
    }
  }
}
