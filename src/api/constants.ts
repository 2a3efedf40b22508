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
