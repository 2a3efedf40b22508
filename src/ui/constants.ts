/**
 * Limits of the browser view the node serves from its local API (src/ui,
 * src/api/ui-routes.ts). Every count, size and time of the view is here.
 */

/** A one-time login code (from `aap-mesh ui`) is good for this long, and for one use. */
export const UI_LOGIN_CODE_TTL_MS = 60_000
/** Random bytes in a login code and in a session id. */
export const UI_SECRET_BYTES = 32
/** Login codes issued and not yet used or expired; the oldest goes first above it. */
export const UI_MAX_LOGIN_CODES = 16
/** A browser session lives this long after its login (the cookie's Max-Age too). */
export const UI_SESSION_TTL_MS = 12 * 60 * 60 * 1000
/** Sessions held at once; the oldest goes first above it. */
export const UI_MAX_SESSIONS = 32
/** The session cookie: HttpOnly, SameSite=Strict, Path=/. */
export const UI_SESSION_COOKIE = 'aap_ui_session'

/**
 * The session cookie's name on the API served at `port`: browsers scope
 * cookies by host, not port, so two nodes' views on one host (two ports of
 * 127.0.0.1) would otherwise log each other out.
 */
export function uiSessionCookie (port: number): string {
  return `${UI_SESSION_COOKIE}_${port}`
}
/**
 * The header a cookie-authenticated request that changes state must carry
 * (any value: a cross-site form cannot set a custom header, and a cross-site
 * fetch that sets one needs a CORS preflight the API never grants).
 */
export const UI_CSRF_HEADER = 'x-aap-ui'
/** Peers listed by GET /v1/peers, at most. */
export const UI_PEERS_MAX = 256
/** Peers GET /v1/peers looks up (a ping when libp2p has no round trip yet, the card's name), at most per request. */
export const UI_PEERS_PING_MAX = 16
/** Each ping and card lookup gives up after this long (the peer is then shown without it). */
export const UI_PING_TIMEOUT_MS = 2_000
/** What GET /v1/peers looked up about a peer is reused for this long. */
export const UI_PING_CACHE_MS = 10_000
/** Static assets of the page are read once at start; one over this size stops the server from starting. */
export const UI_ASSET_MAX_BYTES = 256 * 1024
