/**
 * Limits of the local agent API that came after src/constants.ts was full.
 * The API's first limits (API_*) are still there.
 */

/**
 * An event stream sends its history at its client's pace: past this many
 * unread bytes it waits for the client before it reads the next events from
 * the log, so a long history is never held whole in memory.
 */
export const API_SSE_HISTORY_HIGH_WATER_BYTES = 64 * 1024
