/**
 * A client of the local agent API (fetch-based): JSON calls that return the
 * answer or throw the API's error as an AapError, and SSE streams read as an
 * async iterator of parsed events.
 */
import { request as httpRequest } from 'node:http'
import { request as httpsRequest } from 'node:https'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { CLI_REQUEST_TIMEOUT_MS } from '../constants.ts'
import { AapError, isErrorCode } from '../errors.ts'
import { API_CLIENT_ANSWER_MAX_BYTES, API_CLIENT_SSE_EVENT_MAX_CHARS, API_CLIENT_SSE_SILENCE_MS } from './constants.ts'
import { readApiFiles } from './files.ts'

/** The API answered with an error: its code, message and HTTP status. */
export class ApiError extends AapError {
  readonly status: number

  constructor (status: number, code: AapError['code'], message: string, details?: Record<string, unknown>) {
    super(code, message, details)
    this.name = 'ApiError'
    this.status = status
  }
}

/** The node could not be reached at all (not running, wrong URL). */
export class ApiUnreachableError extends Error {
  constructor (url: string, cause: unknown, message?: string) {
    super(message ?? `cannot reach the node's API at ${url}: ${(cause as Error).message ?? String(cause)}${isRefused(cause) ? ' (is the node running?)' : ''}`, { cause })
    this.name = 'ApiUnreachableError'
  }
}

/**
 * What the node sent could not be read to its end: the connection was cut
 * (the node stopped or died mid-answer), or the answer grew past anything the
 * API sends (a misbehaving sidecar). Nothing more comes from that node, as
 * when it cannot be reached.
 */
export class ApiAnswerBrokenError extends ApiUnreachableError {
  constructor (url: string, message: string, cause?: unknown) {
    super(url, cause, message)
    this.name = 'ApiAnswerBrokenError'
  }
}

function isRefused (err: unknown): boolean {
  const cause = (err as { cause?: { code?: string } }).cause
  return cause?.code === 'ECONNREFUSED'
}

/**
 * A request the old address of a restarted node refused or rejected: nothing
 * was done, so it may go again to the address and token the data directory
 * names now. UNAUTHORIZED: a new node on the old port, with a new token.
 * ECONNREFUSED: no one on the old port; the connection never opened.
 */
function sentToStaleNode (err: unknown): boolean {
  if (err instanceof ApiUnreachableError) return isRefused(err.cause)
  return err instanceof ApiError && err.code === 'UNAUTHORIZED'
}

export interface SseEvent {
  event: string
  data: unknown
  id?: string
}

/**
 * The node's typed error when an event stream ends with an `error` event (its
 * subscription failed: openapi.ts), else undefined.
 */
export function streamFailure (ev: SseEvent): AapError | undefined {
  if (ev.event !== 'error') return undefined
  const e = (ev.data as { error?: { code?: unknown, message?: unknown, details?: unknown } } | undefined)?.error
  const details = typeof e?.details === 'object' && e.details !== null ? e.details as Record<string, unknown> : undefined
  return new AapError(isErrorCode(e?.code) ? e.code : 'INTERNAL', typeof e?.message === 'string' ? e.message : 'the event stream ended with an error', details)
}

export type QueryValue = string | number | boolean | string[] | undefined

function queryString (query: Record<string, QueryValue> | undefined): string {
  if (query === undefined) return ''
  const p = new URLSearchParams()
  for (const [k, v] of Object.entries(query)) {
    if (v === undefined) continue
    if (Array.isArray(v)) for (const item of v) p.append(k, item)
    else p.append(k, String(v))
  }
  const s = p.toString()
  return s === '' ? '' : `?${s}`
}

/**
 * Cancels of an oversized body that failed, counted (and the last one kept)
 * for diagnosis: the call fails either way, and nothing is left to undo.
 */
export const answerCancelFailures: { count: number, last: unknown } = { count: 0, last: undefined }

function cancelFailed (err: unknown): void {
  answerCancelFailures.count++
  answerCancelFailures.last = err
}

/**
 * The body of an answer as text, read up to `max` bytes: a body past it is
 * cancelled and fails with ApiAnswerBrokenError (res.text() would hold any size).
 */
async function boundedText (res: Response, url: string, signal?: AbortSignal, max = API_CLIENT_ANSWER_MAX_BYTES): Promise<string> {
  const declared = Number(res.headers.get('content-length') ?? 0)
  const tooLarge = (): ApiAnswerBrokenError => new ApiAnswerBrokenError(url, `the node's API at ${url} answered with a body over ${max} bytes (API_CLIENT_ANSWER_MAX_BYTES); it is not the API`)
  if (declared > max) {
    await res.body?.cancel().catch(cancelFailed)
    throw tooLarge()
  }
  if (res.body === null) return ''
  const reader = res.body.getReader()
  const parts: Uint8Array[] = []
  let size = 0
  for (;;) {
    let chunk: Awaited<ReturnType<typeof reader.read>>
    try {
      chunk = await reader.read()
    } catch (err) {
      // the call's own time ran out, or its caller gave up, while the body came: not a node gone
      if (signal?.aborted === true) {
        if ((signal.reason as Error | undefined)?.name === 'TimeoutError') throw new ApiError(504, 'TIMEOUT', `the API did not finish its answer in time (at ${url})`)
        throw err
      }
      throw new ApiAnswerBrokenError(url, `the node's answer was cut before its end: ${(err as Error).message ?? String(err)}`, err)
    }
    if (chunk.done) break
    size += chunk.value.byteLength
    if (size > max) {
      await reader.cancel().catch(cancelFailed)
      throw tooLarge()
    }
    parts.push(chunk.value)
  }
  return Buffer.concat(parts).toString('utf8')
}

/** The JSON body of an answer; ApiError for an error answer or a body that is not JSON. */
async function jsonAnswer<T> (res: Response, url: string, signal?: AbortSignal): Promise<T> {
  const text = await boundedText(res, url, signal)
  let parsed: unknown
  try {
    parsed = text === '' ? undefined : JSON.parse(text)
  } catch {
    throw new ApiError(res.status, 'INTERNAL', `the API answered ${res.status} with a body that is not JSON`)
  }
  if (!res.ok) throw errorOf(res.status, parsed)
  return parsed as T
}

export class ApiClient {
  private _url: string
  private token: string
  private readonly timeoutMs: number
  /** Set for a client of a data directory: its API files are read again after the node restarted. */
  private readonly dataDir: string | undefined
  /** Event streams whose reader failed to cancel at their end (nothing is lost; counted for diagnosis). */
  streamCancelErrors = 0
  lastStreamCancelError: unknown

  constructor (url: string, token: string, opts: { timeoutMs?: number, dataDir?: string } = {}) {
    this._url = url.replace(/\/+$/, '')
    this.token = token
    this.timeoutMs = opts.timeoutMs ?? CLI_REQUEST_TIMEOUT_MS
    this.dataDir = opts.dataDir
  }

  /** The API's base URL (for a data directory's client, the one its files named last). */
  get url (): string {
    return this._url
  }

  /**
   * The client of the node running from `dataDir` (its api.json and
   * api-token). A node writes a new token at each start, maybe on a new port:
   * a request refused as UNAUTHORIZED, or by a closed port, reads the files
   * again and, when they name another URL or token, goes once more there.
   */
  static async fromDataDir (dataDir: string, opts: { timeoutMs?: number } = {}): Promise<ApiClient> {
    const { url, token } = await readApiFiles(dataDir)
    return new ApiClient(url, token, { ...opts, dataDir })
  }

  /**
   * `attempt`, and once more when it failed at a node that has since
   * restarted (the data directory names a new URL or token).
   */
  private async againAfterRestart<T> (attempt: () => Promise<T>): Promise<T> {
    try {
      return await attempt()
    } catch (err) {
      if (this.dataDir === undefined || !sentToStaleNode(err)) throw err
      // no readable API files (the node is down): the first failure says what happened
      const now = await readApiFiles(this.dataDir).then(f => f, () => undefined)
      const url = now?.url.replace(/\/+$/, '')
      if (now === undefined || url === undefined || (url === this._url && now.token === this.token)) throw err
      this._url = url
      this.token = now.token
      return attempt()
    }
  }

  /** One JSON call. Resolves with the answer's body; throws ApiError or ApiUnreachableError. */
  async call<T> (method: string, path: string, body?: unknown, query?: Record<string, QueryValue>, signal?: AbortSignal): Promise<T> {
    return this.againAfterRestart(async () => {
      const timeout = AbortSignal.timeout(this.timeoutMs)
      const bounded = signal === undefined ? timeout : AbortSignal.any([timeout, signal])
      const res = await this.fetch(method, path + queryString(query), body, bounded)
      return jsonAnswer<T>(res, this.url, bounded)
    })
  }

  /**
   * Read a server-sent-event stream until it ends or `signal` aborts. A stream
   * refused before it starts throws its ApiError.
   */
  async * stream (path: string, query?: Record<string, QueryValue>, opts: { signal?: AbortSignal, lastEventId?: string, silenceMs?: number } = {}): AsyncGenerator<SseEvent> {
    const headers: Record<string, string> = { accept: 'text/event-stream' }
    if (opts.lastEventId !== undefined) headers['last-event-id'] = opts.lastEventId
    // a node that sends nothing while the client waits for it, not even its keep-alive, is not there to wait for
    // (API_CLIENT_SSE_SILENCE_MS); only the waits count, not the time the caller takes over each event
    const silence = new SilenceWatch(opts.silenceMs ?? API_CLIENT_SSE_SILENCE_MS)
    const signal = opts.signal === undefined ? silence.signal : AbortSignal.any([opts.signal, silence.signal])
    silence.arm()
    const res = await this.againAfterRestart(async () => {
      const answer = await this.fetch('GET', path + queryString(query), undefined, signal, headers)
      if (!answer.ok) throw errorOf(answer.status, await parsedBody(answer, this.url))
      return answer
    }).finally(() => { silence.disarm() })
    yield * this.events(res, opts.signal, silence)
  }

  /** The events of a stream's answer (`stream`); each read waits on `silence`. */
  private async * events (res: Response, signal: AbortSignal | undefined, silence: SilenceWatch): AsyncGenerator<SseEvent> {
    if (res.body === null) return
    const decoder = new TextDecoder()
    let buffer = ''
    // where the search for the next event's end goes on: what came before held none
    let scanned = 0
    const reader = res.body.getReader()
    try {
      for (;;) {
        let chunk: Awaited<ReturnType<typeof reader.read>>
        try {
          silence.arm()
          chunk = await reader.read()
        } catch (err) {
          if (signal?.aborted === true) return
          if (silence.signal.aborted) throw new ApiError(504, 'TIMEOUT', `the node's event stream at ${this.url} sent nothing for ${silence.ms} ms, not even a keep-alive (API_CLIENT_SSE_SILENCE_MS): is the node frozen?`)
          // the node stopped or died mid-stream (undici says only "terminated")
          throw new ApiAnswerBrokenError(this.url, `the node's event stream was cut: ${(err as Error).message ?? String(err)} (did the node stop?)`, err)
        } finally {
          silence.disarm()
        }
        if (chunk.done) return
        buffer += decoder.decode(chunk.value, { stream: true })
        let start = 0
        for (let end = buffer.indexOf('\n\n', scanned); end >= 0; end = buffer.indexOf('\n\n', start)) {
          const ev = parseBlock(buffer.slice(start, end))
          start = end + 2
          if (ev !== undefined) yield ev
        }
        buffer = buffer.slice(start)
        // the last character may be the first half of the next event's end
        scanned = Math.max(0, buffer.length - 1)
        if (buffer.length > API_CLIENT_SSE_EVENT_MAX_CHARS) {
          throw new ApiAnswerBrokenError(this.url, `the node's event stream sent an event over ${API_CLIENT_SSE_EVENT_MAX_CHARS} characters (API_CLIENT_SSE_EVENT_MAX_CHARS) without ending it; it is not the API`)
        }
      }
    } finally {
      // the stream ends here either way; a failed cancel leaves nothing to undo
      await reader.cancel().catch((err: unknown) => { this.streamCancelErrors++; this.lastStreamCancelError = err })
    }
  }

  /**
   * POST a byte stream to `path` (sent as it is read, never whole in memory)
   * and return the JSON answer. The request has no overall timeout: a large
   * upload takes what it takes; `signal` ends it. A connection with nothing
   * sent or received for the client's timeout (a node that took the body and
   * never answers) fails with the TIMEOUT ApiError, as a late call does.
   */
  async upload<T> (path: string, body: AsyncIterable<Uint8Array>, contentType: string, query?: Record<string, QueryValue>, signal?: AbortSignal): Promise<T> {
    const res = await this.send(path + queryString(query), body, contentType, signal)
    return jsonAnswer<T>(res, this.url)
  }

  /**
   * GET `path` as bytes: the answer's body stream (read it to the end or cancel it). Throws the API's error before any byte.
   * No overall timeout (a large artifact takes what it takes). The wait for the head is not bounded either: the node
   * fetches the whole artifact from its holders before its first byte, so only `signal` ends it. Once the head has
   * come, a wait for the rest of an error answer or the next piece of the body longer than the client's timeout fails
   * with the TIMEOUT ApiError.
   */
  async download (path: string, query?: Record<string, QueryValue>, signal?: AbortSignal): Promise<{ size: number | undefined, contentType: string | null, body: ReadableStream<Uint8Array> }> {
    // armed only after the head: the fetch's signal carries it so that a silent body read is cut
    const idle = new SilenceWatch(this.timeoutMs)
    const bounded = signal === undefined ? idle.signal : AbortSignal.any([signal, idle.signal])
    const { res, body } = await this.againAfterRestart(async () => {
      const answer = await this.fetch('GET', path + queryString(query), undefined, bounded, { accept: 'application/octet-stream' })
      if (answer.ok && answer.body !== null) return { res: answer, body: answer.body }
      idle.arm()
      try {
        throw errorOf(answer.status, await parsedBody(answer, this.url, bounded))
      } finally {
        idle.disarm()
      }
    })
    const length = res.headers.get('content-length')
    return { size: length === null ? undefined : Number(length), contentType: res.headers.get('content-type'), body: this.watched(body, idle, path) }
  }

  /** `body`, each read of it bounded by `idle`: a node silent past it fails the read with the TIMEOUT ApiError. */
  private watched (body: ReadableStream<Uint8Array>, idle: SilenceWatch, path: string): ReadableStream<Uint8Array> {
    const reader = body.getReader()
    return new ReadableStream<Uint8Array>({
      pull: async (ctl) => {
        let chunk: Awaited<ReturnType<typeof reader.read>>
        try {
          idle.arm()
          chunk = await reader.read()
        } catch (err) {
          if (idle.signal.aborted) throw new ApiError(504, 'TIMEOUT', `the node sent nothing of GET ${path} for ${idle.ms} ms: is the node frozen?`)
          throw err
        } finally {
          idle.disarm()
        }
        if (chunk.done) ctl.close()
        else ctl.enqueue(chunk.value)
      },
      cancel: async (reason) => { await reader.cancel(reason) }
    })
  }

  /**
   * POST a streamed body with node:http, which hands the socket a piece only
   * once it has taken the last one. undici's fetch read a streamed request
   * body ahead of the socket: an upload of 96 MiB to a node in the same
   * process held about 70 MiB of it (session 30).
   */
  private async send (pathAndQuery: string, bytes: AsyncIterable<Uint8Array>, contentType: string, signal: AbortSignal | undefined): Promise<Response> {
    const url = new URL(this.url + pathAndQuery)
    const open = url.protocol === 'https:' ? httpsRequest : httpRequest
    // a body that fails to read (a file gone, a directory) is not the node's fault: it is thrown as it is
    let readFailure: { err: unknown } | undefined
    let idle = false
    const body = async function * (): AsyncGenerator<Uint8Array> {
      try {
        yield * bytes
      } catch (err) {
        readFailure = { err }
        throw err
      }
    }
    try {
      return await new Promise<Response>((resolve, reject) => {
        const headers = { authorization: `Bearer ${this.token}`, 'content-type': contentType }
        const req = open(url, { method: 'POST', headers, ...(signal === undefined ? {} : { signal }) }, (res) => {
          const parts: Buffer[] = []
          let size = 0
          res.on('data', (piece: Buffer) => {
            size += piece.byteLength
            if (size > API_CLIENT_ANSWER_MAX_BYTES) res.destroy(new ApiAnswerBrokenError(this.url, `the node's API at ${this.url} answered with a body over ${API_CLIENT_ANSWER_MAX_BYTES} bytes (API_CLIENT_ANSWER_MAX_BYTES); it is not the API`))
            else parts.push(piece)
          })
          res.on('error', reject)
          res.on('end', () => { resolve(new Response(Buffer.concat(parts), { status: res.statusCode ?? 502 })) })
        })
        req.on('error', reject)
        // nothing sent or received for the client's time (each piece of the body, and of the answer, starts it again)
        req.setTimeout(this.timeoutMs, () => {
          idle = true
          req.destroy(new Error(`nothing sent or received for ${this.timeoutMs} ms`))
        })
        // an answer may come before the body is all sent (a refusal): the send then ends with the request
        pipeline(Readable.from(body()), req).catch(reject)
      })
    } catch (err) {
      if (readFailure !== undefined) throw readFailure.err
      if (idle || (signal?.reason as Error | undefined)?.name === 'TimeoutError') throw new ApiError(504, 'TIMEOUT', `the API did not answer POST ${pathAndQuery.split('?')[0] ?? ''} in time`)
      if (signal?.aborted === true || err instanceof ApiAnswerBrokenError) throw err
      throw new ApiUnreachableError(this.url, err)
    }
  }

  private async fetch (method: string, pathAndQuery: string, body: unknown, signal: AbortSignal | undefined, extra: Record<string, string> = {}): Promise<Response> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.token}`, ...extra }
    if (body !== undefined) headers['content-type'] = 'application/json'
    // the body's own fault (a value nested past what JSON.stringify can walk) is no fault of the node's
    let text: string | undefined
    try {
      text = body === undefined ? undefined : JSON.stringify(body)
    } catch (err) {
      throw new ApiError(400, 'INVALID_REQUEST', `the request body cannot be sent as JSON: ${(err as Error).message}`, { reason: 'not_json' })
    }
    try {
      return await fetch(this.url + pathAndQuery, {
        method,
        headers,
        ...(text === undefined ? {} : { body: text }),
        ...(signal === undefined ? {} : { signal })
      })
    } catch (err) {
      if ((err as Error).name === 'TimeoutError') throw new ApiError(504, 'TIMEOUT', `the API did not answer ${method} ${pathAndQuery.split('?')[0] ?? ''} in time`)
      if ((err as Error).name === 'AbortError') throw err
      throw new ApiUnreachableError(this.url, err)
    }
  }
}

/** An error answer's body as JSON; undefined when it is not JSON (errorOf then reports the status). */
async function parsedBody (res: Response, url: string, signal?: AbortSignal): Promise<unknown> {
  const text = await boundedText(res, url, signal)
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

function errorOf (status: number, body: unknown): ApiError {
  const e = typeof body === 'object' && body !== null ? (body as { error?: { code?: unknown, message?: unknown, details?: unknown } }).error : undefined
  const code = isErrorCode(e?.code) ? e.code : 'INTERNAL'
  const message = typeof e?.message === 'string' ? e.message : `HTTP ${status}`
  const details = typeof e?.details === 'object' && e.details !== null ? e.details as Record<string, unknown> : undefined
  return new ApiError(status, code, message, details)
}

function parseBlock (block: string): SseEvent | undefined {
  let event = 'message'
  let id: string | undefined
  const data: string[] = []
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue
    const colon = line.indexOf(':')
    const field = colon < 0 ? line : line.slice(0, colon)
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '')
    if (field === 'event') event = value
    else if (field === 'id') id = value
    else if (field === 'data') data.push(value)
  }
  if (data.length === 0) return undefined
  let parsed: unknown
  try {
    parsed = JSON.parse(data.join('\n'))
  } catch {
    parsed = data.join('\n')
  }
  return id === undefined ? { event, data: parsed } : { event, data: parsed, id }
}

/** Aborts `signal` when a wait it was armed for lasts `ms` (ApiClient.stream): armed before each wait, disarmed after. */
class SilenceWatch {
  readonly ms: number
  private readonly controller = new AbortController()
  private timer: ReturnType<typeof setTimeout> | undefined

  constructor (ms: number) { this.ms = ms }

  get signal (): AbortSignal { return this.controller.signal }

  arm (): void {
    clearTimeout(this.timer)
    this.timer = setTimeout(() => { this.controller.abort(new DOMException(`nothing came for ${this.ms} ms`, 'TimeoutError')) }, this.ms)
  }

  disarm (): void { clearTimeout(this.timer) }
}
