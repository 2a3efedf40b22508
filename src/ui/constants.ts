/**
 * Limits of the browser view the node serves from its local API (src/ui,
 * src/api/ui-routes.ts). Every count, size and time of the view is here.
 */

/** A one-time login code (from `aap-mesh ui`) is good for this long, and for one use. */
export const UI_LOGIN_CODE_TTL_MS = 60_000
/** Random bytes in a login code, a session id and a session secret. */
export const UI_SECRET_BYTES = 32
/** Login codes issued and not yet used or expired; the oldest goes first above it. */
export const UI_MAX_LOGIN_CODES = 16
/**
 * A browser session lives this long after its login (the cookie's Max-Age
 * too). A new login is one `aap-mesh ui` away, so a short life costs the user
 * little and bounds how long a leaked session can drive the node.
 */
export const UI_SESSION_TTL_MS = 4 * 60 * 60 * 1000
/** Sessions held at once; the oldest goes first above it. */
export const UI_MAX_SESSIONS = 32
/** The session cookie's name before its port suffix (see uiSessionCookie): HttpOnly, SameSite=Strict, Path=/. */
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
 * The header every API request of the view carries, with the session's
 * secret as its value: it names the session, whatever cookie comes with it
 * (a server on another port can replace the cookie). Browsers send the
 * cookie to every port of 127.0.0.1, so the cookie alone must not authorize
 * anything: the secret lives in the page's sessionStorage, which is per
 * origin (so per port). A cross-site form cannot set a header either, and a
 * cross-origin fetch that sets one needs a CORS preflight the API never grants.
 */
export const UI_SECRET_HEADER = 'x-aap-ui'
/**
 * The login redirects to `/ui#<this>=<secret>`: a URL fragment never reaches
 * a server, and the page moves it to sessionStorage and clears it at once.
 * src/ui/assets/app.js reads the same name.
 */
export const UI_SECRET_FRAGMENT = 'k'
/**
 * Host headers a request to the view (or one made with its cookie) may carry,
 * besides the API's own listening address, each with the API's port. Any
 * other name is refused: a page on a DNS name rebound to 127.0.0.1 is not
 * the node's view.
 */
export const UI_LOOPBACK_HOSTS: readonly string[] = ['localhost', '127.0.0.1', '[::1]']
/** Peers listed by GET /v1/peers, at most. */
export const UI_PEERS_MAX = 256
/** Peers GET /v1/peers looks up (a ping when libp2p has no round trip yet, the card's name), at most per request. */
export const UI_PEERS_PING_MAX = 16
/**
 * Peer look-ups (UI_PEERS_PING_MAX) in flight on the node at once, whatever
 * number of GET /v1/peers asks for them: a request finds a peer's look-up
 * already under way and waits for it, and above this count shows the peer
 * with what is at hand (found by session 59's review: 50 concurrent requests
 * each fetched the same peer's card).
 */
export const UI_PEER_LOOKUPS_IN_FLIGHT_MAX = 32
/** Each ping and card lookup gives up after this long (the peer is then shown without it). */
export const UI_PING_TIMEOUT_MS = 2_000
/** What GET /v1/peers looked up about a peer is reused for this long. */
export const UI_PING_CACHE_MS = 10_000
/** Static assets of the page are read once at start; one over this size stops the server from starting. */
export const UI_ASSET_MAX_BYTES = 256 * 1024
/**
 * Events of a task whose signature and chain link the timeline checks again
 * in one turn of the event loop (api/ui-routes.ts verdicts): a task may hold
 * tens of thousands, and checking all in one go stopped the node for seconds.
 */
export const UI_VERDICTS_PER_TURN = 256
/**
 * How often the streams the view's sessions opened are looked at: a session
 * that expired or was pushed out (UI_MAX_SESSIONS) ends its streams within
 * this; a logout ends them at once.
 */
export const UI_SESSION_STREAMS_CHECK_MS = 5_000
/**
 * Values of the session cookie a request's Cookie header may carry that are
 * looked at, at most. A server on another port of the host may set a cookie
 * of the same name with a longer Path (cookies are not scoped by port), which
 * the browser sends before the real one: the first value that is a live
 * session counts, not the first value (found by session 49's review: a tossed
 * cookie locked the view, across new logins, until the user cleared cookies).
 */
export const UI_SESSION_COOKIE_VALUES_MAX = 8
/**
 * Events of a task the view draws, at most (the newest; the timeline and the
 * events table each say how many are left out): drawing tens of thousands
 * made the tab stall on every redraw. src/ui/assets/app.js holds the same
 * number (EVENTS_SHOWN_MAX): the page is served as it is, and cannot import
 * this file.
 */
export const UI_EVENTS_SHOWN_MAX = 300
/**
 * Events GET /v1/events/{id}/timeline answers with, at most and by default
 * (its `max_events`, which may ask for fewer): the newest, with the runs,
 * transitions and checkpoints they need, and counts of what is left out.
 * The whole replay, each payload three times, made a 10 MB answer of a
 * stranger's 400 progress events of 8 KiB, fetched again after each burst
 * (found by session 56's review). The view draws as many (UI_EVENTS_SHOWN_MAX).
 */
export const UI_TIMELINE_EVENTS_MAX = UI_EVENTS_SHOWN_MAX
/**
 * Protocols GET /v1/peers lists per peer, at most (`/aap/` ones first, then
 * the rest in order; `protocols_total` says how many the peer announced):
 * a peer announces what it likes, and 600 of them were listed (found by
 * session 56's review).
 */
export const UI_PEER_PROTOCOLS_MAX = 64
/** Characters of a protocol name GET /v1/peers lists, at most (a longer one is cut, ending in "…"). */
export const UI_PEER_PROTOCOL_CHARS_MAX = 128
/** Characters of a connection's transport name GET /v1/peers lists, at most. */
export const UI_PEER_TRANSPORT_CHARS_MAX = 32
