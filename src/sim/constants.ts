/**
 * Bounds of the simulation's own processes (src/sim): how long the driver
 * waits for a child it stops.
 */

/**
 * How long a worker or group process may take to stop after SIGTERM (its
 * nodes stop, then it exits) before it is killed (SIGKILL): a child that
 * hangs in its stop must not hang the simulation.
 */
export const SIM_STOP_TIMEOUT_MS = 30_000

/** Workers started at once (`--processes`, src/sim/processes.ts). */
export const WORKER_START_BATCH = 4
/** How long the driver waits for a worker's answer to a log request. */
export const WORKER_LOG_TIMEOUT_MS = 10_000
