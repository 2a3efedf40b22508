/** Bounds of the MCP server (`aap-mesh mcp`). Units are in the names. */

/** Events one `events` tool call returns at most. */
export const MCP_EVENTS_MAX = 500
/** How long `events` waits for new events after the history, by default. */
export const MCP_EVENTS_WAIT_DEFAULT_MS = 1000
/** The longest wait a caller may ask of `events` (and the bound on reading the history). */
export const MCP_EVENTS_WAIT_MAX_MS = 30_000
