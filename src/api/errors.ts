/**
 * Errors of the local API: every failure is `{ error: { code, message } }`
 * with an AAP (or extension) code and the HTTP status that code maps to.
 */
import { AapError, toAapError, type ErrorCode } from '../errors.ts'

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
