/**
 * One server-sent-events response, written on the raw Node response after
 * fastify has let go of it. Whatever ends it (the client going away, a slow
 * client over its buffer, a client that took nothing for API_SSE_STALL_MS,
 * the server closing) runs its `onClose` exactly once,
 * which is where the stream's subscription is released. streamSlots() bounds
 * how many are open at once.
 */
import type { ServerResponse } from 'node:http'
import { API_SSE_HEARTBEAT_MS, API_SSE_MAX_BUFFERED_BYTES } from '../constants.ts'
import { API_SSE_HISTORY_HIGH_WATER_BYTES, API_SSE_STALL_MS } from './constants.ts'
import { HttpError } from './errors.ts'
import { Slots } from './slots.ts'

export interface SseLimits {
  /** A keep-alive comment this often (default API_SSE_HEARTBEAT_MS). */
  heartbeatMs?: number
  /** Unread output past this cuts the client off (default API_SSE_MAX_BUFFERED_BYTES). */
  maxBufferedBytes?: number
  /** Output waiting that the client took none of for this long cuts the client off (default API_SSE_STALL_MS). */
  stallMs?: number
}

/** The server's stream slots (API_MAX_SSE_CLIENTS): one per open stream, work and events together; past them, 429 `too_many_streams`. */
export function streamSlots (max: number): Slots {
  return new Slots(max, (limit) => new HttpError(429, 'INVALID_REQUEST', `too many open streams (limit ${limit}); close one first`, { reason: 'too_many_streams', limit }))
}

export class SseStream {
  private readonly res: ServerResponse
  private readonly maxBuffered: number
  /** Set when the stream was cut off because its client stopped reading. */
  cutOff = false
  /** Set when that was seen by the client taking nothing for the stall bound (cutOff is set too). */
  stalled = false
  private bursting = false
  /**
   * Bytes ever put in the response's buffer, as its writableLength counts
   * them (the HTTP framing too). Less what is still buffered, that is how
   * far the client has taken: the buffer goes out in order.
   */
  private written = 0
  /**
   * The spans of `written` that bursts wrote and the client may not have
   * taken yet, oldest first, and their bytes. Only these are exempt from the
   * bound: a burst's floor taken as everything unread made the output
   * written before the burst exempt too, so each burst raised the bound by
   * what had piled up since the last.
   */
  private readonly bursts: Array<{ from: number, to: number }> = []
  private burstBytes = 0
  private readonly heartbeat: ReturnType<typeof setInterval>
  private readonly closers: Array<() => void> = []
  private ended = false
  /** Settled when the stream ends, however it ends. */
  private readonly end = Promise.withResolvers<void>()
  /** Events held back while a backlog goes out (hold), as the text to write; undefined while not holding. */
  private held: string[] | undefined
  private heldBytes = 0
  /** Closers that threw (each is still called); the last error, for whoever looks. */
  closerErrors = 0
  lastCloserError: unknown

  constructor (res: ServerResponse, limits: SseLimits = {}) {
    this.res = res
    this.maxBuffered = limits.maxBufferedBytes ?? API_SSE_MAX_BUFFERED_BYTES
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      // proxies that buffer would hold events back
      'x-accel-buffering': 'no'
    })
    res.flushHeaders()
    // the head is output like any other: whatever of it is unread counts against the bound
    this.written = res.writableLength
    res.on('close', () => { this.finish() })
    res.on('error', () => { this.finish() })
    // The byte bound alone never cut off a client that stopped reading while the stream waits for it (a backlog
    // waits in drained(), so only keep-alives added up). The socket's inactivity timeout is the stall bound: it is
    // put off by every write the socket takes, even in part (Node counts a partial write), and by anything read
    res.setTimeout(limits.stallMs ?? API_SSE_STALL_MS, () => { this.stall() })
    this.heartbeat = setInterval(() => { this.write(': keep-alive\n\n') }, limits.heartbeatMs ?? API_SSE_HEARTBEAT_MS)
    this.heartbeat.unref()
  }

  get closed (): boolean {
    return this.ended
  }

  /** Run `fn` once when the stream ends, however it ends (at once if it already has). */
  onClose (fn: () => void): void {
    if (this.ended) {
      fn()
      return
    }
    this.closers.push(fn)
  }

  /** One event: `event:` name, optional `id:`, the object as one `data:` line. */
  send (event: string, data: unknown, id?: number): void {
    if (this.ended) return
    const head = id === undefined ? `event: ${event}\n` : `event: ${event}\nid: ${id}\n`
    const text = `${head}data: ${JSON.stringify(data)}\n\n`
    if (this.held === undefined || this.bursting) {
      this.write(text)
      return
    }
    // held output is unread output too: a client that stopped reading is cut off at the same bound
    if (this.heldBytes > this.maxBuffered) {
      this.cut()
      return
    }
    this.held.push(text)
    this.heldBytes += Buffer.byteLength(text)
  }

  /**
   * Hold the events sent from now on (except those of a burst) until
   * release(): a backlog that goes out at its client's pace goes first, and
   * the ids a client sees only grow (a Last-Event-ID never skips an item).
   */
  hold (): void {
    this.held ??= []
  }

  /** Write what was held, in order; events are written as they are sent from now on. */
  release (): void {
    const held = this.held ?? []
    this.held = undefined
    this.heldBytes = 0
    for (const text of held) this.write(text)
  }

  /**
   * Send a backlog no faster than the client reads it: each item in a burst
   * (exempt from the cut-off), and past API_SSE_HISTORY_HIGH_WATER_BYTES
   * unread, a wait for the client (`onWait` is told) before the next. False
   * when the stream ended first.
   */
  async paced<T> (items: Iterable<T>, send: (item: T) => void, onWait?: () => void): Promise<boolean> {
    for (const item of items) {
      if (this.ended) return false
      this.burst(() => { send(item) })
      if (this.buffered > API_SSE_HISTORY_HIGH_WATER_BYTES) {
        onWait?.()
        await this.drained()
      }
    }
    return !this.ended
  }

  /**
   * Send what `fn` sends at once without the cut-off: a client's backlog on
   * connecting (bounded by what the node holds for it), which it has had no
   * chance to read yet. Until that has drained, the bound counts above it,
   * and above it only: what other writes left unread counts in full, however
   * many bursts come after it.
   */
  burst<T> (fn: () => T): T {
    const outer = this.bursting
    const from = this.written
    this.bursting = true
    try {
      return fn()
    } finally {
      this.bursting = outer
      const to = this.written
      if (!outer && to > from) {
        const last = this.bursts.at(-1)
        if (last !== undefined && last.to === from) last.to = to
        else this.bursts.push({ from, to })
        this.burstBytes += to - from
      }
    }
  }

  /** Bytes written that the client has not taken yet. */
  get buffered (): number {
    return this.ended ? 0 : this.res.writableLength
  }

  /**
   * Resolves once what was written has drained to the client, or the stream
   * has ended. At once when the response has not asked for a drain (a write
   * returned false): it would emit none.
   */
  async drained (): Promise<void> {
    if (this.ended || !this.res.writableNeedDrain) return
    const { promise, resolve } = Promise.withResolvers<void>()
    this.res.once('drain', resolve)
    try {
      await Promise.race([promise, this.end.promise])
    } finally {
      this.res.off('drain', resolve)
    }
  }

  /** End the stream from the server side. */
  close (): void {
    if (this.ended) return
    this.res.end()
    this.finish()
  }

  private write (text: string): void {
    if (this.ended) return
    // a client that stopped reading is not allowed to hold the node's memory
    if (!this.bursting && this.res.writableLength - this.unreadBurst() > this.maxBuffered) {
      this.cut()
      return
    }
    const before = this.res.writableLength
    this.res.write(text)
    // the response's socket is corked while it is written to, so the difference is exactly what this write added
    this.written += Math.max(0, this.res.writableLength - before)
  }

  /** Bytes written by bursts that the client has not taken yet (the spans it has taken are forgotten). */
  private unreadBurst (): number {
    const taken = this.written - this.res.writableLength
    let first = this.bursts[0]
    while (first !== undefined && first.to <= taken) {
      this.burstBytes -= first.to - first.from
      this.bursts.shift()
      first = this.bursts[0]
    }
    if (first === undefined) return 0
    return this.burstBytes - Math.max(0, taken - first.from)
  }

  /**
   * The socket took nothing for the stall bound. With output waiting the
   * client stopped reading: it is cut off, and its slot and subscription go
   * with it. With none the stream was only idle (a keep-alive period longer
   * than the bound). A stream the server ended whose client never took the
   * end: its socket goes (with a listener here Node no longer destroys it).
   */
  private stall (): void {
    if (this.ended) {
      this.res.destroy()
      return
    }
    if (this.res.writableLength === 0) return
    this.stalled = true
    this.cut()
  }

  private cut (): void {
    this.cutOff = true
    this.res.destroy()
    this.finish()
  }

  private finish (): void {
    if (this.ended) return
    this.ended = true
    this.held = undefined
    this.end.resolve()
    clearInterval(this.heartbeat)
    for (const fn of this.closers.splice(0)) {
      try {
        fn()
      } catch (err) {
        // one closer never stops the others
        this.closerErrors++
        this.lastCloserError = err
      }
    }
  }
}
