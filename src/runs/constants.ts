/**
 * Limits of the run service (src/runs) added after src/constants.ts filled
 * up; the protocol specs name them like the others (test/wire-docs.test.ts
 * reads this file too).
 */

/**
 * Running or blocked runs one agent may hold on this node at once (a quarter
 * of the default MAX_CONCURRENT_INBOUND_RUNS): one stranger that delegates
 * without end, or leaves its runs blocked, cannot take every slot. Charged
 * to the delegator of a delegated run, to the sender of a handoff. A node
 * that lowers its own limit keeps this share (at most the limit) unless it
 * lowers the share too (`maxInboundRunsPerDelegator`).
 */
export const MAX_INBOUND_RUNS_PER_DELEGATOR = 64
/** Expired idempotency records are deleted this often (and once at start). */
export const IDEMPOTENCY_SWEEP_INTERVAL_MS = 60 * 60 * 1000
/** Idempotency records one sweep reads, and deletes, per batch before it yields. */
export const IDEMPOTENCY_SWEEP_BATCH = 500
