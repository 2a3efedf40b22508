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
