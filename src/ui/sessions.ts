/**
 * Browser logins of the node's view: single-use login codes, exchanged for
 * session ids that travel only in an HttpOnly, SameSite=Strict cookie.
 *
 * A code is handed out to a holder of the API's bearer token (`aap-mesh ui`)
 * and is good once, for UI_LOGIN_CODE_TTL_MS. The bearer token itself never
 * reaches the browser. Codes and sessions are kept by their SHA-256 only,
 * bounded in number, and compared in constant time.
 */
import { createHash, randomBytes } from 'node:crypto'
import { UI_LOGIN_CODE_TTL_MS, UI_MAX_LOGIN_CODES, UI_MAX_SESSIONS, UI_SECRET_BYTES, UI_SESSION_TTL_MS } from './constants.ts'

export interface UiSessionsOptions {
  codeTtlMs?: number
  sessionTtlMs?: number
  /** The clock (tests). */
  now?: () => number
}

function key (secret: string): string {
  return createHash('sha256').update(secret).digest('base64url')
}

/** Expiry times by secret digest, oldest first (a Map keeps insertion order). */
class Expiring {
  private readonly entries = new Map<string, number>()
  private readonly max: number

  constructor (max: number) {
    this.max = max
  }

  add (digest: string, expires: number): void {
    while (this.entries.size >= this.max) {
      const oldest = this.entries.keys().next()
      if (oldest.done === true) break
      this.entries.delete(oldest.value)
    }
    this.entries.set(digest, expires)
  }

  /** True when `digest` is held and not expired; an expired one is dropped. */
  valid (digest: string, now: number): boolean {
    const expires = this.entries.get(digest)
    if (expires === undefined) return false
    if (expires <= now) {
      this.entries.delete(digest)
      return false
    }
    return true
  }

  delete (digest: string): boolean {
    return this.entries.delete(digest)
  }

  prune (now: number): void {
    for (const [d, expires] of this.entries) if (expires <= now) this.entries.delete(d)
  }

  get size (): number {
    return this.entries.size
  }
}

export class UiSessions {
  private readonly codes = new Expiring(UI_MAX_LOGIN_CODES)
  private readonly sessions = new Expiring(UI_MAX_SESSIONS)
  private readonly codeTtlMs: number
  readonly sessionTtlMs: number
  private readonly now: () => number

  constructor (opts: UiSessionsOptions = {}) {
    this.codeTtlMs = opts.codeTtlMs ?? UI_LOGIN_CODE_TTL_MS
    this.sessionTtlMs = opts.sessionTtlMs ?? UI_SESSION_TTL_MS
    this.now = opts.now ?? Date.now
  }

  /** A new single-use login code and when it expires. */
  issueCode (): { code: string, expiresAt: Date } {
    const now = this.now()
    this.codes.prune(now)
    const code = randomBytes(UI_SECRET_BYTES).toString('base64url')
    const expires = now + this.codeTtlMs
    this.codes.add(key(code), expires)
    return { code, expiresAt: new Date(expires) }
  }

  /** Use a login code: a new session id, or undefined when the code is unknown, used or expired. */
  redeem (code: string): string | undefined {
    const digest = key(code)
    const ok = this.codes.valid(digest, this.now())
    // single use: gone whether it was good or not
    this.codes.delete(digest)
    if (!ok) return undefined
    const session = randomBytes(UI_SECRET_BYTES).toString('base64url')
    this.sessions.add(key(session), this.now() + this.sessionTtlMs)
    return session
  }

  /** True for a live session id. (Digests are looked up by hash, so no timing leaks the id.) */
  check (session: string): boolean {
    return this.sessions.valid(key(session), this.now())
  }

  end (session: string): void {
    this.sessions.delete(key(session))
  }

  get stats (): { codes: number, sessions: number } {
    return { codes: this.codes.size, sessions: this.sessions.size }
  }
}
