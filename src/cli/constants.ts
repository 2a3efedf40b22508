/**
 * Limits of the command line that came after src/constants.ts was full.
 * The CLI's first ones (CLI_*) are still there.
 */
import { LIVENESS_PROBE_INTERVAL_MS, LIVENESS_PROBE_TIMEOUT_MS } from '../constants.ts'

/**
 * `start` stops cleanly on SIGINT or SIGTERM and exits at once on a second
 * one. The same signal again within this window of the first is the same
 * request delivered twice, not a second one: Ctrl-C or a service manager
 * signals the whole process group, and under bin/aap-mesh.mjs's hand-over
 * the launcher passes the signal on to the node as well.
 */
export const CLI_SIGNAL_REPEAT_WINDOW_MS = 1_000

/**
 * `runs list --all` and `artifact ls --all` follow the listing's cursors for
 * at most this many pages: past it they stop and print where to go on
 * (--cursor), so a node that hands out new cursors without end cannot keep
 * the command fetching forever.
 */
export const CLI_LIST_ALL_MAX_PAGES = 10_000

/**
 * A page that read nothing and hands back the cursor it was asked with (a run
 * being written at its place took longer than the node waits for it:
 * RUN_LIST_PENDING_WAIT_MS) is asked again, at most this many times in a row;
 * past it the listing is taken for one that never ends.
 */
export const CLI_LIST_SAME_CURSOR_RETRIES = 5

/**
 * ...and for at most this many runs or artifacts in all (what they hold is
 * kept in memory until it is printed).
 */
export const CLI_LIST_ALL_MAX_ITEMS = 100_000

/**
 * The shortest `start --executor-lost-after`: one probe interval and one
 * probe's timeout (LIVENESS_PROBE_INTERVAL_MS + LIVENESS_PROBE_TIMEOUT_MS,
 * 10 s). Shorter, one probe missed or slow declares the executor lost and
 * fails its live runs with EXECUTOR_LOST.
 */
export const CLI_EXECUTOR_LOST_AFTER_MIN_MS = LIVENESS_PROBE_INTERVAL_MS + LIVENESS_PROBE_TIMEOUT_MS
