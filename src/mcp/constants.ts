/** Bounds of the MCP server (`aap-mesh mcp`). Units are in the names. */

/** Events one `events` tool call returns at most. */
export const MCP_EVENTS_MAX = 500
/** How long `events` waits for new events after the history, by default. */
export const MCP_EVENTS_WAIT_DEFAULT_MS = 1000
/** The longest wait a caller may ask of `events` (and the bound on reading the history). */
export const MCP_EVENTS_WAIT_MAX_MS = 30_000
/**
 * Most bytes of one tool result's JSON. The result travels twice on one
 * stdio line (as text and as structured content), and the SDK's stdio
 * client drops a line over 10 MiB, closing the session: 2 MiB keeps the line
 * far under it. `events` stops there (`ended_by: max_bytes`); any other
 * result past it is refused with INVALID_REQUEST (`reason: result_too_large`).
 */
export const MCP_RESULT_MAX_BYTES = 2 * 1024 * 1024
/** `events` calls in progress at once; past it a call is refused (each holds one of the node's event streams). */
export const MCP_EVENTS_CONCURRENT_MAX = 8
/** The longest `events` spends reading the history before its wait starts (then `ended_by: history_timeout`). */
export const MCP_EVENTS_HISTORY_MAX_MS = 15_000
/**
 * The longest a `replay` tool call may ask the node to wait (its
 * `timeout_ms`): under the 60 s an MCP client waits by default, as is
 * `events` at most (MCP_EVENTS_WAIT_MAX_MS + MCP_EVENTS_HISTORY_MAX_MS).
 */
export const MCP_REPLAY_TIMEOUT_MAX_MS = 45_000
/** Room `events` keeps in its result for what surrounds the events themselves (under MCP_RESULT_MAX_BYTES). */
export const MCP_RESULT_MARGIN_BYTES = 4096
/**
 * Tool calls one MCP server runs at once (each holds one request to the
 * node's API, whose connections are bounded by API_MAX_CONNECTIONS): the
 * calls past it wait in order for a free place.
 */
export const MCP_CALLS_CONCURRENT_MAX = 32
/**
 * Tool calls that may wait for a place (past MCP_CALLS_CONCURRENT_MAX);
 * past it a call is refused with INVALID_REQUEST (`reason: too_many_calls`).
 * A call waiting here counts against its MCP_CALL_TIMEOUT_MS.
 */
export const MCP_CALLS_QUEUED_MAX = 1024
/**
 * The longest a tool call takes, its wait for a place included: past it the
 * call ends with a TIMEOUT tool error, under the 60 s an MCP client waits
 * by default (which would give the caller only a protocol timeout) and above
 * what `events` (MCP_EVENTS_HISTORY_MAX_MS + MCP_EVENTS_WAIT_MAX_MS) and
 * `replay` (MCP_REPLAY_TIMEOUT_MAX_MS) take.
 */
export const MCP_CALL_TIMEOUT_MS = 50_000
