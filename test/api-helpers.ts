/**
 * Helpers of the API tests: raw HTTP calls (to send what a well-behaved
 * client never would) and an SSE reader whose events can be awaited.
 */
import { vi } from 'vitest'
import { ApiClient, type QueryValue, type SseEvent } from '../src/api/client.ts'
import type { MeshNode } from '../src/node.ts'

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

/** What a replay bigReplays makes carries at least (its events' blobs). */
export const BIG_REPLAY_BYTES = 24 * 1024 * 1024

/**
 * Make `node`'s replays answer 24 MiB of events (24 of 1 MiB: far more than
 * the sockets' buffers take), for the tasks `big` picks (all by default);
 * `before` runs first (a test holds a replay in its handler with it).
 */
export function bigReplays (node: MeshNode, opts: { big?: (id: string) => boolean, before?: (id: string) => Promise<void> } = {}): void {
  const blob = 'x'.repeat(BIG_REPLAY_BYTES / 24)
  const replay = node.events.replay.bind(node.events)
  vi.spyOn(node.events, 'replay').mockImplementation(async (id, o) => {
    await opts.before?.(id)
    const r = await replay(id, o)
    if (opts.big !== undefined && !opts.big(id)) return r
    const events = Array.from({ length: 24 }, (_, i) => ({ seq: i, blob }))
    return { ...r, events: events as unknown as typeof r.events }
  })
}
