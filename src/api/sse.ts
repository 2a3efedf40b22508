/**
 * One server-sent-events response, written on the raw Node response after
 * fastify has let go of it. Whatever ends it (the client going away, a slow
 * client over its buffer, the server closing) runs its `onClose` exactly once,
 * which is where the stream's subscription is released.
 */
import type { ServerResponse } from 'node:http'
import { API_SSE_HEARTBEAT_MS, API_SSE_MAX_BUFFERED_BYTES } from '../constants.ts'

export interface SseLimits {
  /** A keep-alive comment this often (default API_SSE_HEARTBEAT_MS). */
  heartbeatMs?: number
  /** Unread output past this cuts the client off (default API_SSE_MAX_BUFFERED_BYTES). */
  maxBufferedBytes?: number
}

export class SseStream {
  private readonly res: ServerResponse
  private readonly maxBuffered: number
  /** Set when the stream was cut off because its client stopped reading. */
  cutOff = false
  private bursting = false
  /** Unread bytes of the last burst: the bound counts above them until they have drained. */
  private floor = 0
  private readonly heartbeat: ReturnType<typeof setInterval>
  private readonly closers: Array<() => void> = []
  private ended = false
  /** Settled when the stream ends, however it ends. */
  private readonly end = Promise.withResolvers<void>()
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
    res.on('close', () => { this.finish() })
    res.on('error', () => { this.finish() })
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
    const head = id === undefined ? `event: ${event}\n` : `event: ${event}\nid: ${id}\n`
    this.write(`${head}data: ${JSON.stringify(data)}\n\n`)
  }

  /**
   * Send what `fn` sends at once without the cut-off: a client's backlog on
   * connecting (bounded by what the node holds for it), which it has had no
   * chance to read yet. Until that has drained, the bound counts above it.
   */
  burst<T> (fn: () => T): T {
    this.bursting = true
    try {
      return fn()
    } finally {
      this.bursting = false
      this.floor = this.res.writableLength
      if (this.floor > 0) this.res.once('drain', () => { this.floor = 0 })
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
    if (!this.bursting && this.res.writableLength > this.floor + this.maxBuffered) {
      this.cutOff = true
      this.res.destroy()
      this.finish()
      return
    }
    this.res.write(text)
  }

  private finish (): void {
    if (this.ended) return
    this.ended = true
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
