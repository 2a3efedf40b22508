/**
 * Helpers of the API tests: raw HTTP calls (to send what a well-behaved
 * client never would) and an SSE reader whose events can be awaited.
 */
import { ApiClient, type QueryValue, type SseEvent } from '../src/api/client.ts'

export interface Raw {
  status: number
  headers: Headers
  body: any
}

/** One HTTP request exactly as given; the body is parsed when it is JSON. */
export async function raw (url: string, init: { method?: string, token?: string | null, authorization?: string, body?: string | Buffer, type?: string, headers?: Record<string, string> } = {}): Promise<Raw> {
  const headers: Record<string, string> = { ...(init.headers ?? {}) }
  if (init.authorization !== undefined) headers.authorization = init.authorization
  else if (init.token !== undefined && init.token !== null) headers.authorization = `Bearer ${init.token}`
  if (init.body !== undefined) headers['content-type'] = init.type ?? 'application/json'
  const res = await fetch(url, { method: init.method ?? 'GET', headers, ...(init.body === undefined ? {} : { body: init.body }) })
  const text = await res.text()
  let body: unknown = text
  if ((res.headers.get('content-type') ?? '').includes('json')) body = JSON.parse(text)
  return { status: res.status, headers: res.headers, body }
}

/** An open SSE stream, read in the background. */
export class Stream {
  readonly events: SseEvent[] = []
  readonly done: Promise<void>
  error?: unknown
  private readonly ctl = new AbortController()
  private readonly waiters = new Set<() => void>()

  constructor (client: ApiClient, path: string, query?: Record<string, QueryValue>, lastEventId?: string) {
    this.done = (async () => {
      try {
        for await (const ev of client.stream(path, query, { signal: this.ctl.signal, ...(lastEventId === undefined ? {} : { lastEventId }) })) {
          this.events.push(ev)
          this.wake()
        }
      } catch (err) {
        if (!this.ctl.signal.aborted) this.error = err
      } finally {
        this.ended = true
        this.wake()
      }
    })()
  }

  ended = false

  private wake (): void {
    for (const w of [...this.waiters]) w()
  }

  /** The first event that matches, now or later; rejects when the stream ends first. */
  async next (match: (e: SseEvent) => boolean, what = 'a matching event'): Promise<SseEvent> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const found = this.events.find(match)
        if (found !== undefined) {
          this.waiters.delete(check)
          resolve(found)
        } else if (this.ended) {
          this.waiters.delete(check)
          reject(new Error(`stream ended before ${what}${this.error === undefined ? '' : `: ${String(this.error)}`}`))
        }
      }
      this.waiters.add(check)
      check()
    })
  }

  async ready (): Promise<void> {
    await this.next(e => e.event === 'ready', 'ready')
  }

  /** Disconnect, as a client that goes away does. */
  async close (): Promise<void> {
    this.ctl.abort()
    await this.done
  }
}

export function data<T = any> (e: SseEvent): T {
  return e.data as T
}
