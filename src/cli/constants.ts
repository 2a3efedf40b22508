/**
 * Limits of the command line that came after src/constants.ts was full.
 * The CLI's first ones (CLI_*) are still there.
 */

/**
 * `start` stops cleanly on SIGINT or SIGTERM and exits at once on a second
 * one. The same signal again within this window of the first is the same
 * request delivered twice, not a second one: Ctrl-C or a service manager
 * signals the whole process group, and under bin/aap-mesh.mjs's hand-over
 * the launcher passes the signal on to the node as well.
 */
export const CLI_SIGNAL_REPEAT_WINDOW_MS = 1_000
