/**
 * Browser logins of the node's view: single-use login codes, exchanged for a
 * session id (in an HttpOnly, SameSite=Strict cookie) and a session secret
 * (handed to the page in the URL fragment, kept in the tab's sessionStorage).
 *
 * Browsers send a cookie to every port of its host, so the cookie alone
 * authorizes nothing but the page and its script: an API call must carry the
 * session's own secret in the UI_SECRET_HEADER header, which only the page of
 * this origin holds. The secret finds its session (keyOfSecret) whatever
 * cookies come with the call: a server on another port of the host can also
 * set the cookie, and one that replaced it logged the view out (found by
 * session 59's review). So the secret is a bearer credential of its session,
 * ended with it (logout, expiry, UI_MAX_SESSIONS); it never travels in a URL
 * or a cookie, and a page of another origin cannot read it or, cross-origin,
 * send the header without a CORS preflight the API never grants.
 *
 * A code is handed out to a holder of the API's bearer token (`aap-mesh ui`)
 * and is good once, for UI_LOGIN_CODE_TTL_MS. The bearer token itself never
 * reaches the browser. Codes, session ids and secrets are kept by their
 * SHA-256 only, bounded in number; secrets are compared in constant time.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import { UI_LOGIN_CODE_TTL_MS, UI_MAX_LOGIN_CODES, UI_MAX_SESSIONS, UI_SECRET_BYTES, UI_SESSION_TTL_MS } from './constants.ts'

export interface UiSessionsOptions {
  codeTtlMs?: number
  sessionTtlMs?: number
  /** The clock (tests). */
  now?: () => number
}

/** What a redeemed login code gives: the cookie's session id and the page's secret. */
export interface UiLogin {
  session: string
  secret: string
}

function digest (secret: string): Buffer {
  return createHash('sha256').update(secret).digest()
}

function key (secret: string): string {
  return digest(secret).toString('base64url')
}

const NOTHING = Buffer.alloc(0)

/** Entries by digest with an expiry time and a value, oldest first (a Map keeps insertion order). */
class Expiring {
  private readonly entries = new Map<string, { expires: number, value: Buffer }>()
  private readonly max: number

  constructor (max: number) {
    this.max = max
  }

  add (digest: string, expires: number, value: Buffer = NOTHING): void {
    while (this.entries.size >= this.max) {
      const oldest = this.entries.keys().next()
      if (oldest.done === true) break
      this.entries.delete(oldest.value)
    }
    this.entries.set(digest, { expires, value })
  }

  /** The value of `digest` when it is held and not expired; an expired one is dropped. */
  get (digest: string, now: number): Buffer | undefined {
    const entry = this.entries.get(digest)
    if (entry === undefined) return undefined
    if (entry.expires <= now) {
      this.entries.delete(digest)
      return undefined
    }
    return entry.value
  }

  delete (digest: string): boolean {
    return this.entries.delete(digest)
  }

  prune (now: number): void {
    for (const [d, entry] of this.entries) if (entry.expires <= now) this.entries.delete(d)
  }

  get size (): number {
    return this.entries.size
  }
}

export class UiSessions {
  private readonly codes = new Expiring(UI_MAX_LOGIN_CODES)
  /** Session id digest (the session's key) -> the digest of its secret. */
  private readonly sessions = new Expiring(UI_MAX_SESSIONS)
  /** Secret digest -> its session's key (as bytes), added and pushed out in step with `sessions`; what counts is `sessions`. */
  private readonly bySecret = new Expiring(UI_MAX_SESSIONS)
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

  /** Use a login code: a new session id and its secret, or undefined when the code is unknown, used or expired. */
  redeem (code: string): UiLogin | undefined {
    const d = key(code)
    const ok = this.codes.get(d, this.now()) !== undefined
    // single use: gone whether it was good or not
    this.codes.delete(d)
    if (!ok) return undefined
    const session = randomBytes(UI_SECRET_BYTES).toString('base64url')
    const secret = randomBytes(UI_SECRET_BYTES).toString('base64url')
    const now = this.now()
    this.sessions.prune(now)
    this.bySecret.prune(now)
    this.sessions.add(key(session), now + this.sessionTtlMs, digest(secret))
    this.bySecret.add(key(secret), now + this.sessionTtlMs, digest(session))
    return { session, secret }
  }

  /**
   * The key (the digest of its id) of the live session whose secret
   * `secret` is, whatever session id (cookie) came with it; undefined for
   * none. Looked up by the secret's digest, then checked against the
   * session's own in constant time.
   */
  keyOfSecret (secret: string | undefined): string | undefined {
    if (secret === undefined) return undefined
    const now = this.now()
    const d = digest(secret)
    const sessionDigest = this.bySecret.get(d.toString('base64url'), now)
    if (sessionDigest === undefined) return undefined
    const sessionKey = sessionDigest.toString('base64url')
    const held = this.sessions.get(sessionKey, now)
    if (held === undefined) {
      // the session ended (logout, or pushed out): its secret goes with it
      this.bySecret.delete(d.toString('base64url'))
      return undefined
    }
    return timingSafeEqual(d, held) ? sessionKey : undefined
  }

  /** True for the key of a live session. */
  liveKey (sessionKey: string): boolean {
    return this.sessions.get(sessionKey, this.now()) !== undefined
  }

  /** End the session of this key (its secret then finds nothing). */
  endKey (sessionKey: string): void {
    // its secret's entry goes too: left behind, it would push a live session's secret out of the full table
    const secret = this.sessions.get(sessionKey, this.now())
    if (secret !== undefined) this.bySecret.delete(secret.toString('base64url'))
    this.sessions.delete(sessionKey)
  }

  /** True for a live session id. (Digests are looked up by hash, so no timing leaks the id.) */
  check (session: string): boolean {
    return this.sessions.get(key(session), this.now()) !== undefined
  }

  /** True when `session` is live and `secret` is its own secret (compared in constant time). */
  checkSecret (session: string, secret: string | undefined): boolean {
    const held = this.sessions.get(key(session), this.now())
    if (held === undefined || secret === undefined) return false
    return timingSafeEqual(digest(secret), held)
  }

  get stats (): { codes: number, sessions: number } {
    return { codes: this.codes.size, sessions: this.sessions.size }
  }
}
