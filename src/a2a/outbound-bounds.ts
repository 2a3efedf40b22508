/**
 * Bounds of the outbound bridge (src/a2a/outbound.ts) on what an A2A server
 * sends: the bytes of an answer read whole (A2A_RESPONSE_MAX_BYTES), no
 * redirect followed off the configured origin and path (at most
 * A2A_REDIRECTS_MAX below it), and the run.progress events its status messages become
 * (A2A_PROGRESS_MAX_PER_RUN, A2A_PROGRESS_MIN_INTERVAL_MS, each cut to what an
 * event carries).
 */
import { isParts } from '../artifacts/types.ts'
import { A2A_REDIRECTS_MAX } from './constants.ts'
import { underBase } from './outbound-card.ts'
import { EVENT_PAYLOAD_MAX_BYTES } from '../constants.ts'
import type { Logger } from '../logger.ts'
import { PAYLOAD_MAX_DEPTH } from '../runs/constants.ts'
import type { RunContext } from '../runs/runtime.ts'
import { nestedDeeperThan } from '../util/json-depth.ts'
import { cutText } from '../util/text.ts'
import type { JsonObject } from './mapping.ts'

function messageOf (err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}

/** An A2A server's answer passed A2A_RESPONSE_MAX_BYTES; the SDK may wrap it, so it is looked for down the causes (refusalIn). */
export class A2aAnswerTooLargeError extends Error {
  constructor (url: string, maxBytes: number) {
    super(`the A2A server's answer from ${url.slice(0, 200)} is too large: more than ${maxBytes} bytes (A2A_RESPONSE_MAX_BYTES)`)
    this.name = 'A2aAnswerTooLargeError'
  }
}

/**
 * An A2A server answered with a redirect the bridge does not follow: to another origin, or to a path of the
 * configured origin outside the configured URL's (it would resend a delegation's body to wherever the server
 * names: another host, or another application of the same one), or past A2A_REDIRECTS_MAX.
 */
export class A2aRedirectRefusedError extends Error {
  constructor (url: string, status: number, location: string | null) {
    super(`the A2A server answered ${url.slice(0, 200)} with a redirect (HTTP ${status}) to ${(location ?? '(no location)').slice(0, 200)}: the bridge follows redirects only within the configured origin and below the configured path, at most ${A2A_REDIRECTS_MAX}; configure the URL the agent is served at`)
    this.name = 'A2aRedirectRefusedError'
  }
}

/** The bound an error is, or was caused by (a few causes deep), if any: the SDK may wrap it, and its own message says more. */
export function refusalIn (err: unknown): A2aAnswerTooLargeError | A2aRedirectRefusedError | undefined {
  for (let e = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    if (e instanceof A2aAnswerTooLargeError || e instanceof A2aRedirectRefusedError) return e
  }
  return undefined
}

const REDIRECTS = new Set([301, 302, 303, 307, 308])

/**
 * `fetch` that follows a redirect by hand, and only within the configured base URL: its origin (same scheme, host
 * and port) and below its path by whole segments, as the card's interfaces are kept (outbound-card.ts: a server
 * that adds a trailing slash, an app mounted under the path), at most A2A_REDIRECTS_MAX times; one to another
 * origin, one to another path of the origin (another application there), one past the count, or any of a request
 * given as a Request (its body read once) is refused. As fetch does, 303, and 301 or 302 after a POST, go on as a
 * GET without a body; 307 and 308 keep both.
 */
async function sameOriginFetch (input: Parameters<typeof fetch>[0], init: RequestInit | undefined, base: URL): Promise<{ res: Response, url: string }> {
  let url = input instanceof Request ? input.url : String(input)
  let step = init
  for (let hop = 0; ; hop++) {
    const res = await fetch(hop === 0 ? input : url, { ...step, redirect: 'manual' })
    if (!REDIRECTS.has(res.status)) return { res, url }
    const location = res.headers.get('location')
    const next = location === null ? null : URL.parse(location, url)
    if (next === null || next.origin !== base.origin || !underBase(next.href, base) || hop >= A2A_REDIRECTS_MAX || input instanceof Request) {
      const err = new A2aRedirectRefusedError(url, res.status, location)
      await res.body?.cancel(err)
      throw err
    }
    await res.body?.cancel()
    const method = (step?.method ?? 'GET').toUpperCase()
    if (res.status === 303 || ((res.status === 301 || res.status === 302) && method === 'POST')) step = { ...step, method: 'GET', body: null }
    url = next.href
  }
}

/** Whether the request asks for an event stream: the SDK's streaming calls send `Accept: text/event-stream`, its other requests JSON. */
function asksForStream (input: Parameters<typeof fetch>[0], init: RequestInit | undefined): boolean {
  const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined))
  return (headers.get('accept') ?? '').includes('text/event-stream')
}

/**
 * `fetch` for the SDK's card resolver and transports: an answer's body is read up to `maxBytes`, and past it the
 * read stops with an A2aAnswerTooLargeError (the connection closed). Only an event stream the request asked for
 * (an ok answer of type text/event-stream to a streaming call) goes through whole: the SDK's SSE reader bounds
 * each of its events, and a long task streams on. Every other answer, whatever type it claims, is read through
 * the bound, since the SDK reads it whole (response.json()). A redirect is followed only within `base`, the
 * agent's configured URL: its origin and below its path (sameOriginFetch); one elsewhere is refused
 * (A2aRedirectRefusedError): the bridge talks only to the agent the operator configured.
 */
export function boundedFetch (maxBytes: number, base: URL): typeof fetch {
  return async (input, init) => {
    const { res, url } = await sameOriginFetch(input, init, base)
    if (res.body === null) return res
    if (res.ok && (res.headers.get('content-type') ?? '').startsWith('text/event-stream') && asksForStream(input, init)) return res
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

/** What became of status messages that could not be reported as they came, all forwarded tasks together. */
export interface ProgressStats {
  /** Reported cut (too large, too deep, or `parts` that are no parts), marked `truncated: true`. */
  progressCut: number
  /** Not reported: the run refused the progress (it had ended, or the payload was still unfit). */
  progressRefused: number
}

function jsonBytes (v: unknown): number {
  return Buffer.byteLength(JSON.stringify(v))
}

/**
 * A progress payload from an A2A server made fit for a run.progress event, and whether it was cut: a payload
 * nested deeper than PAYLOAD_MAX_DEPTH keeps only its text; `parts` that are not a list of parts go; one over
 * `maxBytes` as JSON keeps only its text, cut until it fits. A cut payload says so (`truncated: true`).
 */
export function fitProgress (payload: JsonObject, maxBytes: number = EVENT_PAYLOAD_MAX_BYTES): { payload: JsonObject, cut: boolean } {
  const textOnly = (p: JsonObject): JsonObject => typeof p.text === 'string' ? { text: p.text } : {}
  let p = payload
  if (nestedDeeperThan(p, PAYLOAD_MAX_DEPTH)) p = textOnly(p)
  else if (p.parts !== undefined && !isParts(p.parts)) p = Object.fromEntries(Object.entries(p).filter(([k]) => k !== 'parts'))
  if (p === payload && jsonBytes(p) <= maxBytes) return { payload, cut: false }
  let out: JsonObject = { ...p, truncated: true }
  let size = jsonBytes(out)
  if (size <= maxBytes) return { payload: out, cut: true }
  const text = typeof p.text === 'string' ? p.text : ''
  out = text.length > 0 ? { text, truncated: true } : { truncated: true }
  size = jsonBytes(out)
  // JSON takes from 1 to 6 bytes per UTF-16 unit of text: cut by the share that fits until it does (a few rounds)
  for (let chars = text.length; size > maxBytes && chars > 0;) {
    chars = Math.min(chars - 1, Math.floor(chars * maxBytes / size * 0.95))
    out = { text: cutText(text, Math.max(0, chars)), truncated: true }
    size = jsonBytes(out)
  }
  return { payload: size <= maxBytes ? out : { truncated: true }, cut: true }
}

/**
 * The run.progress events of one forwarded task: at most `maxPerRun` of them, at most one per `minIntervalMs`
 * (status messages that come faster are coalesced, the latest reported when the time is up). Past the count
 * further ones are dropped: counted, and logged once. A status message is information, never a reason to fail
 * the run: one an event cannot carry is cut to fit (fitProgress), and one the run refuses is counted in
 * each of `stats` and logged, and the task goes on.
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
  /** Where the counts go: the bridge's own, and its node's totals (stats.ts). */
  private readonly stats: readonly ProgressStats[]
  private refused = 0

  constructor (ctx: RunContext, log: Logger, bounds: ProgressBounds, stats: readonly ProgressStats[]) {
    this.ctx = ctx
    this.log = log
    this.bounds = bounds
    this.stats = stats
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
    const fitted = fitProgress(progress)
    if (fitted.cut) {
      for (const s of this.stats) s.progressCut++
      this.log.debug({ run_id: this.ctx.run.run_id }, 'a2a: a status message did not fit a progress event; it is reported cut')
    }
    this.chain = this.chain.then(async () => this.ctx.progress(fitted.payload)).catch((err: unknown) => {
      for (const s of this.stats) s.progressRefused++
      // one warning per run: a run that ended refuses every later report alike
      this.log[this.refused++ === 0 ? 'warn' : 'debug']({ err: messageOf(err), run_id: this.ctx.run.run_id }, 'a2a: a status message was not reported as progress; the task goes on')
    })
    await this.chain
  }
}
