/**
 * Bounds of the outbound bridge (src/a2a/outbound.ts) on what an A2A server
 * sends: the bytes of an answer read whole (A2A_RESPONSE_MAX_BYTES), and the
 * run.progress events its status messages become (A2A_PROGRESS_MAX_PER_RUN,
 * A2A_PROGRESS_MIN_INTERVAL_MS).
 */
import type { Logger } from '../logger.ts'
import type { RunContext } from '../runs/runtime.ts'
import type { JsonObject } from './mapping.ts'

function messageOf (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}

/** An A2A server's answer passed A2A_RESPONSE_MAX_BYTES; the SDK may wrap it, so it is looked for down the causes. */
export class A2aAnswerTooLargeError extends Error {
  constructor (url: string, maxBytes: number) {
    super(`the A2A server's answer from ${url.slice(0, 200)} is too large: more than ${maxBytes} bytes (A2A_RESPONSE_MAX_BYTES)`)
    this.name = 'A2aAnswerTooLargeError'
  }
}

/** The A2aAnswerTooLargeError an error is, or was caused by (a few causes deep), if any. */
export function tooLargeIn (err: unknown): A2aAnswerTooLargeError | undefined {
  for (let e = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    if (e instanceof A2aAnswerTooLargeError) return e
  }
  return undefined
}

/**
 * `fetch` for the SDK's card resolver and transports: an answer's body is read up to `maxBytes`, and past it the
 * read stops with an A2aAnswerTooLargeError (the connection closed). An event stream (an ok answer of type
 * text/event-stream) goes through whole: the SDK's SSE reader bounds each of its events, and a long task streams on.
 */
export function boundedFetch (maxBytes: number): typeof fetch {
  return async (input, init) => {
    const res = await fetch(input, init)
    const url = input instanceof Request ? input.url : String(input)
    if (res.body === null || (res.ok && (res.headers.get('content-type') ?? '').startsWith('text/event-stream'))) return res
    if (Number(res.headers.get('content-length') ?? 0) > maxBytes) {
      const err = new A2aAnswerTooLargeError(url, maxBytes)
      await res.body.cancel(err)
      throw err
    }
    const reader = res.body.getReader()
    let read = 0
    const body = new ReadableStream<Uint8Array>({
      async pull (controller) {
        const { done, value } = await reader.read()
        if (done) {
          controller.close()
          return
        }
        read += value.byteLength
        if (read <= maxBytes) {
          controller.enqueue(value)
          return
        }
        const err = new A2aAnswerTooLargeError(url, maxBytes)
        controller.error(err)
        await reader.cancel(err)
      },
      async cancel (reason) {
        await reader.cancel(reason)
      }
    })
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers })
  }
}

/** Bounds on the run.progress events of one forwarded task (tests make them small). */
export interface ProgressBounds {
  maxPerRun: number
  minIntervalMs: number
}

/**
 * The run.progress events of one forwarded task: at most `maxPerRun` of them, at most one per `minIntervalMs`
 * (status messages that come faster are coalesced, the latest reported when the time is up). Past the count
 * further ones are dropped: counted, and logged once.
 */
export class ProgressGate {
  private sent = 0
  private dropped = 0
  private coalesced = 0
  private last = Number.NEGATIVE_INFINITY
  private pending: JsonObject | undefined
  private timer: NodeJS.Timeout | undefined
  private chain: Promise<void> = Promise.resolve()

  private readonly ctx: RunContext
  private readonly log: Logger
  private readonly bounds: ProgressBounds

  constructor (ctx: RunContext, log: Logger, bounds: ProgressBounds) {
    this.ctx = ctx
    this.log = log
    this.bounds = bounds
  }

  /** Report at once, within the count (the A2A task id: it does not hold back the status message after it). */
  async now (progress: JsonObject): Promise<void> {
    if (this.full()) return
    await this.send(progress, false)
  }

  /** Report a status message: at once when the interval has passed since the last one, else the latest of them when it has. */
  async report (progress: JsonObject): Promise<void> {
    if (this.full()) return
    if (this.pending !== undefined) this.coalesced++
    this.pending = progress
    if (this.timer !== undefined) return
    const wait = this.last + this.bounds.minIntervalMs - Date.now()
    if (wait <= 0) {
      await this.flush()
      return
    }
    this.timer = setTimeout(() => {
      this.timer = undefined
      this.flush().catch((err: unknown) => {
        this.log.warn({ err: messageOf(err), run_id: this.ctx.run.run_id }, 'a2a: could not report the task\'s latest status message as progress')
      })
    }, wait)
  }

  /** Drop a status message not reported yet (the task blocks or ends: its own event says more). */
  discard (): void {
    clearTimeout(this.timer)
    this.timer = undefined
    if (this.pending !== undefined) this.coalesced++
    this.pending = undefined
  }

  close (): void {
    this.discard()
    if (this.dropped > 0 || this.coalesced > 0) {
      this.log.debug({ run_id: this.ctx.run.run_id, reported: this.sent, coalesced: this.coalesced, dropped: this.dropped }, 'a2a: status messages not reported as progress')
    }
  }

  private full (): boolean {
    if (this.sent < this.bounds.maxPerRun) return false
    if (this.dropped++ === 0) {
      this.log.warn({ run_id: this.ctx.run.run_id, max: this.bounds.maxPerRun }, 'a2a: the task reported as much progress as a run may; later status messages are not reported')
    }
    return true
  }

  private async flush (): Promise<void> {
    const p = this.pending
    this.pending = undefined
    if (p === undefined || this.full()) return
    await this.send(p, true)
  }

  private async send (progress: JsonObject, timed: boolean): Promise<void> {
    this.sent++
    if (timed) this.last = Date.now()
    const sent = this.chain.then(async () => this.ctx.progress(progress))
    this.chain = sent.catch((err: unknown) => {
      this.log.debug({ err: messageOf(err), run_id: this.ctx.run.run_id }, 'a2a: a progress report failed')
    })
    await sent
  }
}
