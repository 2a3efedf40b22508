/**
 * Limits of the events service (src/events) that came after src/constants.ts
 * was full; the protocol specs name them like the others (test/wire-docs.test.ts
 * reads this file too).
 */
import { EVENTS_MAX_RUNS_PER_CORRELATION, SYNC_CONCURRENCY } from '../constants.ts'

/**
 * Of a correlation's EVENTS_MAX_RUNS_PER_CORRELATION admitted runs, this many
 * are kept for the owner's own delegations (root runs): runs under a root
 * (sub-delegations, handoff successors) take the rest. However many runs the
 * executors in the task sign under their runs, the owner's next delegation
 * still enters its task.
 */
export const EVENTS_ROOT_RUNS_RESERVED = 128
/**
 * Bytes of events (as JSON) a replay reads of a correlation into memory: past
 * it the replay is refused (INVALID_REQUEST, reason replay_too_large) instead
 * of building an answer that could take the node's memory (a correlation may
 * hold up to EVENTS_MAX_RUNS_PER_CORRELATION runs of EVENTS_MAX_EVENTS_PER_RUN
 * events each). Far above an honest task's log; its runs stay readable one by
 * one (GET /v1/runs/{run_id}/events, sync).
 */
export const REPLAY_MAX_BYTES = 32 * 1024 * 1024

/**
 * Events held early (gossip ahead of their run's chain) wait this long after
 * their gap's fetch began for the gap to be filled; then they are let go (the
 * tail sync fetches them again). They take the correlation's early budget
 * (EVENTS_EARLY_MAX_PER_CORRELATION): an executor that sends events past a
 * seq it never sends would otherwise keep it for good, and every other run's
 * reordered gossip would wait for sync.
 */
export const EVENTS_EARLY_HOLD_MS = 5_000

/**
 * Admitted runs under one root run (its sub-delegations and handoffs, and
 * theirs, at any depth): the executor of one delegation, who can sign
 * tickets under its run without end, fills at most this many of the task's
 * runs, and the other delegations' lines still enter it.
 */
export const EVENTS_MAX_RUNS_PER_ROOT = EVENTS_MAX_RUNS_PER_CORRELATION / 4

/**
 * Proofs of forked runs (two events its executor signed at one seq) a node
 * keeps (forks.ts): each is two events, at most 2 × EVENT_MAX_BYTES. A fork
 * is a misbehaving executor's, never an honest node's; past this, the oldest
 * proof makes room (a run whose proof went is judged again if another of its
 * forks arrives).
 */
export const EVENTS_FORKS_MAX = 1024

/**
 * Syncs a node runs at once with one agent, within SYNC_CONCURRENCY for all:
 * a stranger whose runs are fetched from it, and which answers each page just
 * within its time, holds at most this many of the node's sync slots, and the
 * other syncs (a subscriber's first, a tail repair, a handoff's confirmation)
 * go on beside it.
 */
export const SYNC_CONCURRENCY_PER_AGENT = 2

/**
 * Someone waits on a correlation (a subscriber, a replay) and no run of it
 * may still move: its last live run just ended, or a participant joined the
 * topic. For this long the tail's rounds go on anyway, each (when no event
 * came since the last) asking the vouched participants for runs this node
 * does not know: a run whose every gossip copy was lost meanwhile (a
 * sub-delegation, a handoff's successor, the task's next step) is found
 * within it. Beyond it nothing polls an ended task; a first round is due
 * again at the next join or live run.
 */
export const EVENTS_QUIET_WATCH_MS = 60_000

/**
 * A participant's join opens a quiet watch (EVENTS_QUIET_WATCH_MS) at most
 * once in this long: a peer that leaves and joins the topic again and again
 * (or whose joins a router reports more than once) would otherwise keep the
 * tail's rounds at their least delay, each asking every vouched participant
 * for the whole correlation, for as long as it went on.
 */
export const EVENTS_JOIN_WATCH_EVERY_MS = EVENTS_QUIET_WATCH_MS

/**
 * Past the quiet watch, a correlation whose only reason to be polled is a
 * run ended by its delegator's verdict (the executor's own events may still
 * replace it, for up to LIVENESS_NOTICE_MAX_AGE_MS) has its tail rounds
 * doubled up to this rather than EVENTS_TAIL_SYNC_MAX_MS: a follower of a
 * failed run asks its participants about 150 times in a day, not 2,900.
 */
export const EVENTS_VERDICT_SYNC_MAX_MS = 600_000

/**
 * Gossiped events a correlation queues on its lock (CorrTrack.lock) while a
 * task holds it: a head load, a sync answer or a subscriber's history being
 * written or read. Each waits with its event (up to EVENT_MAX_BYTES) in memory,
 * and a task can hold the lock as long as the disk takes to answer: behind a
 * stalled or hung disk an executor publishing at gossip speed would fill the
 * node's memory. Past this many waiting, a gossiped event is not queued: it is
 * ignored (the sender did nothing wrong) and its run is fetched by sync once
 * what waits has run. That costs the run a sync round and a later delivery,
 * only while the lock is that far behind; the waiting events take at most
 * this many times EVENT_MAX_BYTES (3 MiB) per correlation.
 */
export const EVENTS_LOCK_WAITING_MAX = 64

/**
 * Sync answers of one correlation placed at once or waiting for its lock
 * (syncer.ts, and Events.fetchRun / fetchCorrelation). A sync waits there
 * holding one of the node's SYNC_CONCURRENCY slots: behind a lock held by a
 * stalled disk, the syncs of one busy task would otherwise take every slot,
 * and no other task would sync. Past this many (or with
 * EVENTS_LOCK_WAITING_MAX already waiting), a sync's page is not placed: the
 * sync ends and gives its slot back, and it is made again once the lock has
 * run what waits on it (a caller of fetchRun gets a typed error). A quarter
 * of the node's slots.
 */
export const EVENTS_LOCK_SYNCS_MAX = SYNC_CONCURRENCY / 4

/**
 * Subscriptions of one correlation waiting for its lock to hand over their
 * history, and iterator subscriptions' pulls of their next page (catch-up.ts).
 * Past this many (or with EVENTS_LOCK_WAITING_MAX already waiting), a new
 * subscription or a pull waits aside for the lock to run what waits on it
 * before it queues (lock-queues.ts): a stalled disk under a task many clients
 * follow costs a bounded queue, not one task per reader. Once the lock has
 * run what waited, only the readers' own count keeps a reader aside, so a
 * flood of one task's gossip (which refills EVENTS_LOCK_WAITING_MAX as fast
 * as the disk drains it) does not keep readers out.
 */
export const EVENTS_LOCK_READERS_MAX = 16

/**
 * How long a new subscription waits aside for its correlation's lock to make
 * room (EVENTS_LOCK_READERS_MAX) before it is refused with TIMEOUT (reason
 * correlation_busy): a brief stall of the disk (a slow write, a burst of one
 * task's gossip) costs a subscriber a wait, not its subscription; only a lock
 * that stays behind this long refuses it (the caller may try again). An
 * iterator's pull that has waited this long queues at the next drain whatever
 * the readers' count, so no pull waits aside for ever behind other readers.
 */
export const EVENTS_SUBSCRIBE_BUSY_WAIT_MS = 5_000

/**
 * Events of this node's own runs past the lock's bound are read back from its
 * log (local-events.ts). A read that fails (a disk read error, a stretch not
 * found) keeps them noted, and the read is made again after this long,
 * doubling at each failure in a row up to EVENTS_LOCAL_READBACK_RETRY_MAX_MS;
 * until it succeeds, the correlation's later events of this node's runs are
 * noted too, so none reaches a subscriber out of order.
 */
export const EVENTS_LOCAL_READBACK_RETRY_MS = 100

/** The longest back-off between read-backs of this node's own events that failed (EVENTS_LOCAL_READBACK_RETRY_MS). */
export const EVENTS_LOCAL_READBACK_RETRY_MAX_MS = 30_000

/**
 * Fetches of startless runs (events past seq 1 of a run no one vouched for)
 * in flight on behalf of the messages one peer relayed (startless.ts): a
 * relayer of a stranger's events, each under a fresh key, holds at most this
 * many of the node's sync slots; its other startless runs are not fetched
 * until their events come again or someone vouched for names them.
 */
export const EVENTS_STARTLESS_FETCHES_PER_SOURCE = 2
