/**
 * Errors of the local API: every failure is `{ error: { code, message } }`
 * with an AAP (or extension) code and the HTTP status that code maps to.
 */
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { AapError, toAapError, type ErrorCode } from '../errors.ts'
import type { Logger } from '../logger.ts'
import { API_ERROR_PATH_MAX_CHARS, API_MAX_PARAM_CHARS } from './constants.ts'
import type { NodeMetrics } from './metrics.ts'

export const HTTP_STATUS: Record<ErrorCode, number> = {
  AGENT_NOT_FOUND: 404,
  RUN_NOT_FOUND: 404,
  CAPABILITY_NOT_SUPPORTED: 422,
  DELEGATION_REFUSED: 409,
  INVALID_TRANSITION: 409,
  INVALID_REQUEST: 400,
  // 401 is kept for a missing or wrong API token; a refusal from the mesh is 403
  UNAUTHORIZED: 403,
  INVALID_SIGNATURE: 502,
  TIMEOUT: 504,
  INTERNAL: 500,
  ARTIFACT_NOT_FOUND: 404,
  // the bytes a holder sent are not the ones the id names
  ARTIFACT_CORRUPT: 502,
  STORAGE_FULL: 507
}

export interface ErrorBody {
  error: { code: ErrorCode, message: string, details?: Record<string, unknown> }
}

/** An AapError with an HTTP status of its own (e.g. 401, 413, 429), when the code's default does not fit. */
export class HttpError extends AapError {
  readonly status: number

  constructor (status: number, code: ErrorCode, message: string, details?: Record<string, unknown>) {
    super(code, message, details)
    this.name = 'HttpError'
    this.status = status
  }
}

/** Fastify's own errors (parsing, limits, validation) carry a statusCode and an FST_ code. */
interface FastifyLikeError {
  statusCode?: number
  code?: string
  message?: string
  validation?: unknown
  validationContext?: string
}

function fastifyError (err: unknown): FastifyLikeError | undefined {
  if (typeof err !== 'object' || err === null || err instanceof AapError) return undefined
  const e = err as FastifyLikeError
  return typeof e.statusCode === 'number' ? e : undefined
}

/** Name the offending field: ajv's own words leave out which property was unknown. */
function validationMessage (f: FastifyLikeError): string {
  const where = f.validationContext ?? 'request'
  const first = Array.isArray(f.validation) ? f.validation[0] as { instancePath?: string, message?: string, params?: Record<string, unknown> } | undefined : undefined
  if (first === undefined) return `invalid ${where}: ${f.message ?? 'invalid'}`
  const path = `${where}${first.instancePath ?? ''}`
  const extra = first.params?.additionalProperty
  if (typeof extra === 'string') return `${path} has an unknown field "${extra.slice(0, 64)}"`
  return `${path} ${first.message ?? 'is invalid'}`
}

/** Status and body for anything thrown by a route, a hook or fastify itself. */
export function errorReply (err: unknown): { status: number, body: ErrorBody } {
  const f = fastifyError(err)
  if (f !== undefined && f.statusCode !== undefined && f.statusCode < 500) {
    const status = f.statusCode
    let message = f.message ?? 'bad request'
    if (f.code === 'FST_ERR_CTP_BODY_TOO_LARGE') message = 'request body is too large'
    else if (f.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') message = 'request body must be application/json'
    else if (f.code === 'FST_ERR_CTP_INVALID_JSON_BODY') message = 'request body is not valid JSON'
    else if (f.validation !== undefined) message = validationMessage(f)
    return { status, body: { error: { code: 'INVALID_REQUEST', message, details: { reason: f.code ?? 'invalid' } } } }
  }
  const e = toAapError(err)
  const status = e instanceof HttpError ? e.status : HTTP_STATUS[e.code]
  const body: ErrorBody = { error: { code: e.code, message: e.message } }
  if (e.details !== undefined) body.error.details = e.details
  return { status, body }
}

/** A request's path (no query) as error messages and logs quote it: at most API_ERROR_PATH_MAX_CHARS. */
export function quotedPath (url: string): string {
  const path = url.split('?')[0] ?? ''
  return path.length > API_ERROR_PATH_MAX_CHARS ? `${path.slice(0, API_ERROR_PATH_MAX_CHARS)}…` : path
}

/**
 * The router's refusal of `url` (fastify's frameworkErrors) as the API's own
 * INVALID_REQUEST: fastify's quotes the whole path. Any other is left to
 * errorReply.
 */
export function routerError (err: { code?: string }, url: string): unknown {
  if (err.code === 'FST_ERR_MAX_PARAM_LENGTH') {
    return new HttpError(400, 'INVALID_REQUEST', `a path parameter is longer than ${API_MAX_PARAM_CHARS} characters: ${quotedPath(url)}`, { reason: 'param_too_long', limit: API_MAX_PARAM_CHARS })
  }
  if (err.code === 'FST_ERR_BAD_URL') return new HttpError(400, 'INVALID_REQUEST', `the path is not valid percent-encoded UTF-8: ${quotedPath(url)}`, { reason: 'bad_url' })
  return err
}

/** Answer `err` for `req` (the server's error handler, and the router's refusals): counted, logged, sent. */
export function answerError (err: unknown, req: FastifyRequest, reply: FastifyReply, metrics: NodeMetrics | undefined, log: Logger): void {
  const { status, body } = errorReply(err)
  // refused before its body was read (a 401 is answered before any is): the socket closes after the answer,
  // instead of reading and dropping whatever the client sends, for as long as it sends it
  if (!req.raw.complete) reply.header('connection', 'close')
  metrics?.errors.inc({ code: body.error.code, source: 'api' })
  if (status >= 500) log.error({ err, method: req.method, url: req.url }, 'API request failed')
  else log.debug({ status, code: body.error.code, method: req.method, url: req.url }, body.error.message)
  void reply.code(status).send(body)
}

/**
 * What the HTTP layer refuses before there is a request to route (fastify's
 * clientErrorHandler), in the API's own shape: a request that did not arrive
 * within API_HEADERS_TIMEOUT_MS (its head) or API_REQUEST_TIMEOUT_MS (all of
 * it) is 408 TIMEOUT, a head past Node's size bound 431, anything that is not
 * HTTP 400. The answer goes on the raw socket, which is then closed.
 */
export function answerClientError (err: { code?: string }, socket: Socket, metrics: NodeMetrics | undefined, log: Logger): void {
  // a reset connection is gone: there is nobody to answer
  if (err.code === 'ECONNRESET' || socket.destroyed) {
    log.debug({ code: err.code }, 'an API connection was reset before its request arrived')
    return
  }
  const e = err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
    ? new HttpError(408, 'TIMEOUT', 'the request did not arrive in time (its head within API_HEADERS_TIMEOUT_MS, all of it within API_REQUEST_TIMEOUT_MS)', { reason: 'request_timeout' })
    : err.code === 'HPE_HEADER_OVERFLOW'
      ? new HttpError(431, 'INVALID_REQUEST', 'the request head is larger than the server takes', { reason: 'head_too_large' })
      : new HttpError(400, 'INVALID_REQUEST', 'the request is not valid HTTP/1.1', { reason: 'bad_http', parser: err.code ?? 'unknown' })
  const { status, body } = errorReply(e)
  metrics?.errors.inc({ code: body.error.code, source: 'api' })
  log.debug({ status, code: err.code }, body.error.message)
  const text = JSON.stringify(body)
  // a response already under way on this connection (an event stream, a pipelined request's answer) gets no status
  // line in its body: the socket just closes, as Node's own handler does
  const current = (socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage
  if (current?.headersSent === true) {
    socket.destroy()
    return
  }
  if (socket.writable) {
    socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`)
  }
  socket.destroySoon()
}
