/**
 * Limits of the run service (src/runs) added after src/constants.ts filled
 * up; the protocol specs name them like the others (test/wire-docs.test.ts
 * reads this file too).
 */

/**
 * Running or blocked runs one agent may hold on this node at once (a quarter
 * of the default MAX_CONCURRENT_INBOUND_RUNS): one stranger that delegates
 * without end, or leaves its runs blocked, cannot take every slot. Charged
 * to the delegator of a delegated run, to the sender of a handoff.
 */
export const MAX_INBOUND_RUNS_PER_DELEGATOR = 64
/**
 * Unless it is set (`maxInboundRunsPerDelegator`), a delegator's share is the
 * node's limit divided by this (rounded up), at most
 * MAX_INBOUND_RUNS_PER_DELEGATOR: a node that lowers its limit to 16 gives
 * each delegator 4, not all 16. A share that is set is kept (at most the
 * node's limit).
 */
export const INBOUND_RUNS_SHARE_DIVISOR = 4
/** Expired idempotency records are deleted this often (and once at start). */
export const IDEMPOTENCY_SWEEP_INTERVAL_MS = 60 * 60 * 1000
/** Idempotency records one sweep reads, and deletes, per batch before it yields. */
export const IDEMPOTENCY_SWEEP_BATCH = 500
/**
 * A run's failure message is cut to this many characters wherever this node
 * writes one (a handler's ctx.fail, its error, a verdict): under the Run
 * schema's 1024 (ERROR_MESSAGE_MAX_CHARS), the bound the API's fail request has.
 */
export const FAILURE_MESSAGE_MAX_CHARS = 1000
/**
 * Deepest nesting of a delegation's input or a handoff's context (INVALID_REQUEST,
 * reason too_deep). The run's events, sync pages and answers carry it a few
 * levels further down, and each of those frames must stay under the wire's
 * FRAME_JSON_MAX_DEPTH (128), so it is half of that.
 */
export const PAYLOAD_MAX_DEPTH = 64
/**
 * A live delegated run whose every probe for this many times the liveness
 * bound (`lostAfterMs`, EXECUTOR_LOST_AFTER_MS 30 s by default, so 2 min) was
 * answered with something other than the run (an error frame, or a run the
 * delegator's checks refuse) is declared lost like a run whose executor went
 * silent: the executor is there, but this node will never learn how the run
 * ends. A move of the run's record (an event) starts the count again.
 */
export const LIVENESS_UNREAD_BOUND_FACTOR = 4
/**
 * A handoff successor whose confirmation did not come in time asks the
 * sender for the predecessor (get_run) at most this many times while the
 * sender cannot be asked (no connection, or no answer in time), then fails
 * with HANDOFF_UNCONFIRMED. An answer decides at once.
 */
export const HANDOFF_CONFIRM_ASKS_MAX = 4
/** Between two asks of a sender that could not be asked (15 s of waits after HANDOFF_CONFIRM_TIMEOUT_MS, plus the asks' own time: a get_run and one sync page each). */
export const HANDOFF_CONFIRM_ASK_INTERVAL_MS = 5_000
/**
 * A delegation policy's answer is waited for at most this many times the
 * responder's handler timeout (HANDLER_TIMEOUT_MS, 8 s by default): one that
 * answers after its request ended is still acted on (the run is created and,
 * its handle undeliverable, fails with HANDLE_UNDELIVERED), one that never
 * answers is given up and keeps no slot, nor idempotency key, for good.
 */
export const DELEGATION_POLICY_TIMEOUT_FACTOR = 2
/**
 * A write of a run's state that the store refused (STORAGE_FULL: a full or
 * failing disk) is made again after this long, the wait doubling up to
 * RUN_WRITE_RETRY_MAX_MS: an executor's ending of a run while the run still
 * runs here (src/runs/end-retry.ts), and a delegator's record of a run it
 * delegated (src/runs/refused-records.ts).
 */
export const RUN_WRITE_RETRY_MIN_MS = 500
export const RUN_WRITE_RETRY_MAX_MS = 30_000
/**
 * Delegator's records the store refused that are kept to be written again
 * (each the newest state of its run); past it the oldest is given up (logged
 * and counted: that run's record here stays as the disk has it).
 */
export const RUN_REFUSED_RECORDS_MAX = 4096
/**
 * A blocked run this node executes is given up (failed, DELEGATOR_LOST, its
 * slot freed) when neither its delegator nor any agent it authorized to
 * resume it has been heard from for this long (6 h): a blocked run waits for
 * a person, and a checkpoint may sit through a working day, a night or a
 * delegator's own restart, so the bound is far past any of those; but a
 * delegator that left for good (a throwaway key that blocked its runs and
 * went) no longer holds the executor's run slots for ever. Counted from the
 * last answer, or from when this node (re)started and first saw the run.
 */
export const BLOCKED_ORPHAN_AFTER_MS = 6 * 60 * 60 * 1000
/**
 * The longest a blocked run is kept past its delegator's last sign of life
 * by the answers of agents it authorized to resume it (24 h, four times
 * BLOCKED_ORPHAN_AFTER_MS). A resumer may be a person's agent that goes on
 * with a run whose delegator's node went away, so its answers keep the run
 * for a working day and a night more; but the delegator writes the list of
 * resumers itself and may name any node that is always online (a bootstrap
 * node), and that node's answer says nothing about the run: without a bound
 * a throwaway delegator would hold a run slot for good through it. When
 * only BLOCKED_ORPHAN_AFTER_MS is set (tests), this bound keeps its ratio.
 */
export const BLOCKED_ORPHAN_RESUMER_MAX_MS = 4 * BLOCKED_ORPHAN_AFTER_MS
/**
 * How often the delegators (and authorized resumers) of blocked runs are
 * asked whether they are there (10 min): a get_verdict each, so 36 rounds
 * before BLOCKED_ORPHAN_AFTER_MS gives a run up. A run one of whose parties
 * was heard from within the interval is not asked about.
 */
export const BLOCKED_ORPHAN_CHECK_INTERVAL_MS = 10 * 60 * 1000
/**
 * Agents asked per check round at most, one ask in flight per agent: a node
 * holding many blocked runs of many delegators spreads its asks over rounds.
 * Each blocked run not heard from within the interval puts one of its
 * parties forward (the one asked longest ago), and those asked longest ago
 * go first: with the default 256 slots each run gets an ask at least every
 * 8 rounds, well inside the 36 rounds of BLOCKED_ORPHAN_AFTER_MS.
 */
export const BLOCKED_ORPHAN_PROBES_PER_ROUND = 32
/**
 * A blocked run whose delegator answers this many checks in a row that it
 * holds no live record of it (it never delegated it, or its record ended) is
 * failed with DELEGATOR_LOST: more than one, so a handoff successor blocked
 * before its delegator has learned of the handoff is not given up.
 */
export const BLOCKED_ORPHAN_UNHELD_ANSWERS = 2

/**
 * Most list-members of a W3C tracestate passed on (the W3C limit): a longer
 * one keeps its first this many, in their order (the OpenTelemetry parser
 * would reverse them), and their text is then at most TRACESTATE_MAX_CHARS.
 */
export const TRACESTATE_MAX_MEMBERS = 32

/**
 * Trace contexts of this node's own delegations kept in memory (trace.ts
 * RecentTraces), for control calls on runs it does not follow; the oldest
 * goes first. About 200 bytes each.
 */
export const RUN_TRACES_REMEMBERED_MAX = 4_096

/**
 * The earlier turns a turn's handler is shown (`ctx.conversation.turns`, a
 * sidecar's work item), as JSON, at most: the newest that fit together,
 * oldest first, and the turns before them are left out (their `turn`
 * numbers say how many). Without it a turn held every earlier turn of its
 * conversation (up to CONTEXT_MAX_TURNS, each with an input of up to
 * RUN_INPUT_MAX_BYTES, far more once parsed) for as long as it ran. One
 * turn's input and output (within an event payload) fit, so the turn just
 * before is always shown.
 */
export const CONTEXT_CONVERSATION_MAX_BYTES = 64 * 1024

/** Base64url characters of a run listing cursor's MAC (and of its filter digest): 132 bits. */
export const RUN_CURSOR_MAC_CHARS = 22

/**
 * Successors still to record (a delegator stopped between writing a handed-off
 * run's record and its successor's, adoptions.ts) asked after at one start;
 * any more wait for the next start.
 */
export const SUCCESSOR_ADOPTIONS_AT_START_MAX = 1024

/**
 * Successors refused here (their executor answered they do not continue the
 * run that names them) whose mark is not staged again by a later write of
 * that run's record (a write the disk refused, made again: adoptions.ts).
 * The oldest is forgotten first; a forgotten one's mark goes at the next start.
 */
export const SUCCESSORS_REFUSED_REMEMBERED = 1024

/**
 * How long one page of a run listing waits, in all, for runs still being
 * written at places it must not pass (run-places.ts): it reads on once they
 * are saved. Past it, the page stops before them (its cursor lists them
 * later), or an unfiltered listing leaves the executing side, counted.
 */
export const RUN_LIST_PENDING_WAIT_MS = 1_000
