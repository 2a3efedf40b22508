/**
 * Limits of the local agent API that came after src/constants.ts was full.
 * The API's first limits (API_*) are still there.
 */
import { API_SSE_HEARTBEAT_MS, EVENT_MAX_BYTES } from '../constants.ts'
import { REPLAY_MAX_BYTES } from '../events/constants.ts'

/**
 * An event stream sends its history at its client's pace: past this many
 * unread bytes it waits for the client before it reads the next events from
 * the log, so a long history is never held whole in memory.
 */
export const API_SSE_HISTORY_HIGH_WATER_BYTES = 64 * 1024

/**
 * An SSE stream with output waiting whose client has taken none of it for
 * this long is cut off and its stream slot released. The byte bound
 * (API_SSE_MAX_BUFFERED_BYTES) alone let a client that stopped reading
 * mid-history keep its slot and subscription for days: the history waits for
 * the client, so only keep-alives added up. It is the socket's inactivity
 * timeout, which any write the socket takes, even in part, puts off. The
 * node sees a client's reading only when the kernel takes more from it,
 * which with full socket buffers on Linux can wait for a megabyte or more of
 * reading: a client that far behind must read that much per period. Four
 * keep-alive periods (API_SSE_HEARTBEAT_MS).
 */
export const API_SSE_STALL_MS = 4 * API_SSE_HEARTBEAT_MS

/**
 * The latest instant a `since` of GET /v1/runs may name: the last the run
 * index orders by (src/runs/run-index.ts keys instants as ISO text with a
 * four-digit year). A later one, or no instant at all (month 13), is refused
 * with INVALID_REQUEST (reason `bad_since`) instead of listing every run.
 */
export const API_RUNS_SINCE_MAX_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999)

/**
 * Answers that may be large (a replay, the view's timeline: up to
 * REPLAY_MAX_BYTES of events) are made into JSON text about this much at a
 * time, the event loop running between (src/util/json-in-turns.ts): in one
 * go, 20,000 events held the node for over 0.1 s.
 */
export const API_JSON_BYTES_PER_TURN = 1024 * 1024

/**
 * Work item ids a bridge may hand out per millisecond since its start before
 * its ids could reach those of a bridge started later (a restart): its first
 * id is the clock in ms times this. Ids keep within the 15 digits a
 * Last-Event-ID may have (the API's pattern) until the year 2286.
 */
export const WORK_ITEM_IDS_PER_MS = 100

/**
 * The longest a request may take to arrive, headers and body (Node's
 * requestTimeout; a request still arriving then gets 408 and its socket is
 * closed). The largest body is an artifact upload, ARTIFACT_MAX_BYTES
 * (128 MiB): this lets one arrive at about 146 KiB/s. Answers are not bound
 * by it: an SSE stream's request ended when its headers did.
 */
export const API_REQUEST_TIMEOUT_MS = 15 * 60_000

/**
 * The longest the head of a request (or a socket's first request) may take
 * to arrive: Node's own default, or the request timeout when a server is
 * given a shorter one (the tests'). Node swaps the two when this one is the
 * longer, which would stretch the request timeout to this.
 */
export const API_HEADERS_TIMEOUT_MS = 60_000

/**
 * How often the server looks for requests past API_REQUEST_TIMEOUT_MS or
 * heads past API_HEADERS_TIMEOUT_MS (Node checks at intervals, not on a timer
 * per request): Node's own period, or the request timeout when a server is
 * given a shorter one (the tests').
 */
export const API_CONNECTION_CHECK_MS = 30_000

/**
 * Connections the API holds open at once; past it a new one is closed as it
 * comes (and logged). Every stream (API_MAX_SSE_CLIENTS, 64) and a pool of
 * keep-alive sockets for each client fit far below it; without it, clients
 * that opened sockets and held them (each for up to API_REQUEST_TIMEOUT_MS)
 * were bound only by the process's file descriptors.
 */
export const API_MAX_CONNECTIONS = 1024

/**
 * Longest path parameter the router takes (find-my-way's maxParamLength);
 * past it a request is refused with INVALID_REQUEST (reason
 * `param_too_long`). A run id may be long; the routes' own schemas bound
 * every parameter below this.
 */
export const API_MAX_PARAM_CHARS = 512

/**
 * Most characters of a request's path an error message quotes (a refused
 * path may be as long as the request head): enough to see which request it
 * was.
 */
export const API_ERROR_PATH_MAX_CHARS = 100

/**
 * The API client's (client.ts, the CLI's and MCP's) longest server-sent
 * event it holds while it waits for the event's end (UTF-16 units of text). The API sends one run event (at most
 * EVENT_MAX_BYTES, 48 KiB) or one work item per SSE event: a node that sends
 * more without ending the event is not the API, and the stream fails.
 */
export const API_CLIENT_SSE_EVENT_MAX_CHARS = 8 * EVENT_MAX_BYTES
/**
 * Largest JSON answer the client reads. The largest the API gives is a
 * replay: up to REPLAY_MAX_BYTES (32 MiB) of events, with the transitions
 * and runs that quote them; a body past this bound fails the call.
 */
export const API_CLIENT_ANSWER_MAX_BYTES = 4 * REPLAY_MAX_BYTES

/**
 * The API client's (the CLI's, MCP's) bound on an event stream that sends
 * nothing: no head, no event and no keep-alive (the server sends one every
 * API_SSE_HEARTBEAT_MS) for this long, and the stream fails with TIMEOUT.
 * Before, `aap-mesh send` or `events --follow` against a node that froze
 * (stopped, swapped out, its machine asleep) waited until Ctrl-C.
 */
export const API_CLIENT_SSE_SILENCE_MS = 4 * API_SSE_HEARTBEAT_MS

/**
 * Replays and timelines (GET /v1/events/{id}/replay and /timeline) made or
 * sent at once, together; past it another is refused with 429
 * INVALID_REQUEST (reason `too_many_replays`). Each may read up to
 * REPLAY_MAX_BYTES (32 MiB) of events into memory and hold its JSON text
 * until its client has taken it: without a bound, 200 at once were all in
 * memory together. A slot is held until the answer is made and its socket
 * has taken it (or gone).
 */
export const API_REPLAYS_CONCURRENT_MAX = 4

/**
 * A JSON answer or an artifact download that its client takes none of for
 * this long is cut off: its socket is destroyed, and what was waiting in it
 * (up to a whole replay) goes with it. Before, a client that sent one replay
 * request and never read kept the answer buffered for good. As with SSE
 * streams (API_SSE_STALL_MS) it is the socket's inactivity timeout, which
 * any write the socket takes, even in part, puts off.
 */
export const API_ANSWER_IDLE_MS = API_SSE_STALL_MS

/**
 * Connections the metrics port (`--metrics`) holds open at once; past it a
 * new one is closed as it comes. A scraper needs one or two: without it,
 * clients holding sockets open were bound only by the process's file
 * descriptors.
 */
export const METRICS_MAX_CONNECTIONS = 64

/**
 * The longest a request to the metrics port may take to arrive (head
 * included: Node's headersTimeout and requestTimeout); a request has no body
 * there. A socket that sends nothing holds a connection no longer than this.
 */
export const METRICS_REQUEST_TIMEOUT_MS = 10_000

/** How often the metrics port looks for requests past METRICS_REQUEST_TIMEOUT_MS (Node checks at intervals). */
export const METRICS_CONNECTION_CHECK_MS = 2_000

/**
 * Ports fetch refuses to connect to, before connecting, with a TypeError
 * ('bad port'): the "port blocking" list of the Fetch standard
 * (https://fetch.spec.whatwg.org/#port-blocking), as Node's undici has it
 * (lib/web/fetch/constants.js, badPorts). A webhook on one of them, or on
 * port 0 (no server listens there), could never be delivered to: PUT
 * /v1/card and `card set --webhook` refuse it (reason bad_webhook).
 */
export const WEBHOOK_BAD_PORTS: ReadonlySet<number> = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79,
  87, 95, 101, 102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137,
  139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532,
  540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723,
  2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679,
  6697, 10080
])
