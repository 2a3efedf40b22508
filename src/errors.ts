/**
 * Typed errors. The five AAP profile codes come first; the extension codes
 * cover cases the profile leaves to the host (bad frames, authority, internal).
 * Every error that crosses the wire is an `{ code, message }` pair; the
 * receiver rebuilds an AapError from it, so callers only ever branch on `code`.
 */

export const AAP_ERROR_CODES = [
  'AGENT_NOT_FOUND',
  'CAPABILITY_NOT_SUPPORTED',
  'DELEGATION_REFUSED',
  'RUN_NOT_FOUND',
  'INVALID_TRANSITION'
] as const

export const EXTENSION_ERROR_CODES = [
  /** Malformed, oversized, truncated or non-schema input. */
  'INVALID_REQUEST',
  /** The authenticated caller may not do this to this run. */
  'UNAUTHORIZED',
  /** A card, event or record failed verification. */
  'INVALID_SIGNATURE',
  /** A peer did not answer in time (maps to "unavailable" for callers). */
  'TIMEOUT',
  /** The responder failed; no state was changed by this request. */
  'INTERNAL',
  /** No artifact (or chunk) with that content id here, or at any holder tried. */
  'ARTIFACT_NOT_FOUND',
  /** Artifact bytes that do not hash to their content id, or a truncated chunk or manifest. */
  'ARTIFACT_CORRUPT',
  /** The node's artifact store is at its bound (ARTIFACT_STORE_MAX_BYTES). */
  'STORAGE_FULL'
] as const

export type AapErrorCode = typeof AAP_ERROR_CODES[number]
export type ExtensionErrorCode = typeof EXTENSION_ERROR_CODES[number]
export type ErrorCode = AapErrorCode | ExtensionErrorCode

const ALL_CODES: ReadonlySet<string> = new Set([...AAP_ERROR_CODES, ...EXTENSION_ERROR_CODES])

export function isErrorCode (value: unknown): value is ErrorCode {
  return typeof value === 'string' && ALL_CODES.has(value)
}

export interface ErrorFrame {
  code: ErrorCode
  message: string
  details?: Record<string, unknown>
}

export class AapError extends Error {
  readonly code: ErrorCode
  readonly details?: Record<string, unknown>

  constructor (code: ErrorCode, message: string, details?: Record<string, unknown>, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'AapError'
    this.code = code
    if (details !== undefined) this.details = details
  }

  toFrame (): ErrorFrame {
    return this.details === undefined
      ? { code: this.code, message: this.message }
      : { code: this.code, message: this.message, details: this.details }
  }

  static fromFrame (frame: ErrorFrame): AapError {
    return new AapError(frame.code, frame.message, frame.details)
  }
}

export class AgentNotFoundError extends AapError {
  constructor (message: string, details?: Record<string, unknown>, options?: { cause?: unknown }) {
    super('AGENT_NOT_FOUND', message, details, options)
    this.name = 'AgentNotFoundError'
  }
}

export class CapabilityNotSupportedError extends AapError {
  constructor (message: string, details?: Record<string, unknown>) {
    super('CAPABILITY_NOT_SUPPORTED', message, details)
    this.name = 'CapabilityNotSupportedError'
  }
}

export class DelegationRefusedError extends AapError {
  constructor (message: string, details?: Record<string, unknown>) {
    super('DELEGATION_REFUSED', message, details)
    this.name = 'DelegationRefusedError'
  }
}

export class RunNotFoundError extends AapError {
  constructor (message: string, details?: Record<string, unknown>) {
    super('RUN_NOT_FOUND', message, details)
    this.name = 'RunNotFoundError'
  }
}

export class InvalidTransitionError extends AapError {
  constructor (message: string, details?: Record<string, unknown>) {
    super('INVALID_TRANSITION', message, details)
    this.name = 'InvalidTransitionError'
  }
}

export class InvalidRequestError extends AapError {
  constructor (message: string, details?: Record<string, unknown>, options?: { cause?: unknown }) {
    super('INVALID_REQUEST', message, details, options)
    this.name = 'InvalidRequestError'
  }
}

export class UnauthorizedError extends AapError {
  constructor (message: string, details?: Record<string, unknown>) {
    super('UNAUTHORIZED', message, details)
    this.name = 'UnauthorizedError'
  }
}

export class InvalidSignatureError extends AapError {
  constructor (message: string, details?: Record<string, unknown>) {
    super('INVALID_SIGNATURE', message, details)
    this.name = 'InvalidSignatureError'
  }
}

export class TimeoutError extends AapError {
  constructor (message: string, details?: Record<string, unknown>, options?: { cause?: unknown }) {
    super('TIMEOUT', message, details, options)
    this.name = 'TimeoutError'
  }
}

export class ArtifactNotFoundError extends AapError {
  constructor (message: string, details?: Record<string, unknown>, options?: { cause?: unknown }) {
    super('ARTIFACT_NOT_FOUND', message, details, options)
    this.name = 'ArtifactNotFoundError'
  }
}

export class ArtifactCorruptError extends AapError {
  constructor (message: string, details?: Record<string, unknown>) {
    super('ARTIFACT_CORRUPT', message, details)
    this.name = 'ArtifactCorruptError'
  }
}

export class StorageFullError extends AapError {
  constructor (message: string, details?: Record<string, unknown>) {
    super('STORAGE_FULL', message, details)
    this.name = 'StorageFullError'
  }
}

/**
 * The call reached nobody who answered (no connection, or no answer in
 * time): AGENT_NOT_FOUND or TIMEOUT. Asking again later may get an answer;
 * any other error is an answer.
 */
export function unreached (e: AapError): boolean {
  return e.code === 'AGENT_NOT_FOUND' || e.code === 'TIMEOUT'
}

/** Turn anything thrown into an AapError without losing a typed code. */
export function toAapError (err: unknown, fallback: ErrorCode = 'INTERNAL'): AapError {
  if (err instanceof AapError) return err
  const e = err as { name?: string, message?: string } | undefined
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError') {
    return new TimeoutError(e.message ?? 'timed out', undefined, { cause: err })
  }
  return new AapError(fallback, reasonOf(err), undefined, { cause: err })
}

/**
 * What went wrong, in words, for anything thrown: its message, or its name
 * and code when it has no message (libp2p and the stream layers throw some
 * errors without one; a dial failure once read "…: undefined"), or what it is
 * when it is not an Error at all.
 */
export function reasonOf (err: unknown): string {
  if (typeof err === 'string') return err
  if (typeof err !== 'object' || err === null) return String(err)
  const e = err as { message?: unknown, name?: unknown, code?: unknown, type?: unknown }
  if (typeof e.message === 'string' && e.message !== '') return e.message
  const name = typeof e.name === 'string' && e.name !== '' ? e.name : err.constructor?.name ?? 'object'
  const code = typeof e.code === 'string' ? ` (${e.code})` : ''
  const type = typeof e.type === 'string' ? ` of type ${e.type}` : ''
  return `${name}${code}${type} without a message`
}
