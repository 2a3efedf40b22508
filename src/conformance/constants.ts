/**
 * Sizes, counts and times of the conformance kit and the conformance agent.
 * Kept beside the kit (not in src/constants.ts): nothing else uses them.
 */

/** The well-known capability a node under test serves with the scripted conformance agent. */
export const CONFORMANCE_CAPABILITY = { capability_id: 'cap:aap-conformance', version: '0.1.0' } as const

/** The longest a `hold` run of the conformance agent stays running before it completes on its own. */
export const AGENT_HOLD_MAX_MS = 120_000
/** The longest the agent waits for its own run.blocked event before it tries to resume itself. */
export const AGENT_SELF_RESUME_WAIT_MS = 10_000
/** The longest a `report` run waits for the self-resume attempt it reports on. */
export const AGENT_REPORT_WAIT_MS = 20_000
/** The longest the agent's policy holds a `stall-accept` delegation while waiting for the caller to go. */
export const AGENT_STALL_MAX_MS = 30_000
/** Self-resume attempts the agent remembers (oldest forgotten first). */
export const AGENT_MAX_REMEMBERED_ATTEMPTS = 256
/** `progress` events a `complete` run may be asked to emit. */
export const AGENT_MAX_PROGRESS_EVENTS = 16

/** One request of the kit, from writing it to its answer. */
export const KIT_CALL_TIMEOUT_MS = 15_000
/** Dialing a stream to a peer for one request. */
export const KIT_DIAL_TIMEOUT_MS = 5_000
/** Waiting for a run to reach an expected event or state. */
export const KIT_WAIT_TIMEOUT_MS = 20_000
/** Between two reads of a run while waiting for it to change. */
export const KIT_POLL_INTERVAL_MS = 25
/**
 * The discover check's card-only node reaching the target by agent id: its
 * dial (a DHT lookup of the target's addresses) and its one get_run's answer,
 * each. A target that holds the stream unanswered fails after this long.
 */
export const KIT_REACH_TIMEOUT_MS = 5_000
/** Finding the target's card by capability through discover (the DHT may need a few rounds). */
export const KIT_DISCOVER_TIMEOUT_MS = 30_000
/** One check, all its requests and waits together. */
export const KIT_CHECK_TIMEOUT_MS = 60_000
/** Pages of events the kit reads for one run. */
export const KIT_MAX_SYNC_PAGES = 64
/** Events of a followed run the kit reads from the delegator's own copy (the conformance agent's runs have a few). */
export const KIT_FOLLOWED_EVENTS_MAX = 64
/** Levels of a Run or an event the endpoint scan descends; deeper counts as endpoint data (it cannot be shown clean). */
export const KIT_SCAN_MAX_DEPTH = 64
/** Characters of an evidence string kept in the report; also the most of any one string the target wrote that the kit copies. */
export const KIT_EVIDENCE_MAX_CHARS = 600
/** Characters of a check's message kept in the report (the kit's own words plus the target's, each already cut). */
export const KIT_MESSAGE_MAX_CHARS = 2_000
/** Bytes of event pages the kit takes in one read of a run or a correlation; more fails the check that read them. */
export const KIT_MAX_EVENT_BYTES_PER_READ = 4 * 1024 * 1024
/**
 * Run answers the kit keeps over a kit run (each answer that differs from the
 * one before it of the same run): runs-correlation, no-endpoint-upward and
 * capability-by-ref judge every one. A kit run against aap-mesh keeps about
 * a hundred; one more than this fails the check that got it.
 */
export const KIT_RUN_ANSWERS_MAX = 512
/** Bytes of events the kit keeps over all runs it read (the last read of each, and what earlier reads and reads of tasks showed that it does not hold); more fails the check that read them. */
export const KIT_MAX_EVENT_BYTES_KEPT = 64 * 1024 * 1024
/**
 * Running or blocked runs the kit's delegator holds on the target at once, at
 * most (slow checks run beside the others). A target whose limit per
 * delegator is lower refuses some runs for capacity: those checks are
 * inconclusive, not failed.
 */
export const KIT_RUNS_PER_DELEGATOR_NEEDED = 8
/** How long the kit, as a stalled caller, waits on a delegation the agent holds before it gives up. */
export const STALLED_CALLER_PATIENCE_MS = 12_000
/** How long the kit waits for the target's answer to a handoff towards a receiver that never answers. */
export const HANDOFF_STALL_PATIENCE_MS = 30_000
/**
 * Handoff streams the kit's stalled peer holds unanswered at once: the stall
 * check needs one; streams past this (a target opening them in a loop) are
 * reset at once, and a stream its opener closed is let go.
 */
export const KIT_STALLED_STREAMS_MAX = 16
/**
 * The gap between the two halves of the delegate frame the stalled-frame
 * check sends on a slow path: a target must wait for the rest of a started
 * frame (its frame time), not refuse the first half.
 */
export const KIT_SPLIT_FRAME_GAP_MS = 300
/**
 * How old the empty read of a refused task must be before no-late-runs reads
 * it again: a target that creates the run a moment after its refusal has had
 * this long to show it.
 */
export const KIT_LATE_RUN_MIN_AGE_MS = 3_000
/** Reads of a run still running (get_run, then its log) until both name the same last seq, in run-logs. */
export const KIT_LOG_READ_TRIES = 3
