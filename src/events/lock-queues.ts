/**
 * Bounds on what queues on a correlation's lock (CorrTrack.lock) besides
 * gossip, which placement.ts sheds past EVENTS_LOCK_WAITING_MAX. The lock
 * can stay held as long as the disk takes to answer (a stalled write, a slow
 * read), and a busy or hostile peer can keep it behind with one task's
 * gossip; whatever else waits there must not grow with it:
 *
 * - sync answers (placeSynced): each waits holding a sync slot, so past
 *   EVENTS_LOCK_SYNCS_MAX the page is not placed and the sync ends with
 *   LockBusyError, which gives its slot back; the syncer makes it again once
 *   the lock has run what waits on it (shed.ts);
 * - a subscription's history handover (readLocked): refused with
 *   LockBusyError (TIMEOUT, reason correlation_busy) past
 *   EVENTS_LOCK_READERS_MAX, before it is queued;
 * - an iterator's next page (pullLocked): waits for the lock to drain, not on
 *   it, and then queues (one such wait per subscription).
 *
 * Events of this node's own runs never wait beyond the bound either
 * (local-events.ts). Every refusal is counted in stats.lockRefused.
 */
import { AapError } from '../errors.ts'
import { EVENTS_LOCK_READERS_MAX, EVENTS_LOCK_SYNCS_MAX, EVENTS_LOCK_WAITING_MAX } from './constants.ts'
import type { CorrTrack, EventsStats } from './track.ts'

/** A correlation's lock is too far behind to queue this task; nothing was changed, try again later. */
export class LockBusyError extends AapError {
  constructor (t: CorrTrack, what: 'sync' | 'subscribe', max: number) {
    super('TIMEOUT', `correlation ${t.id} is busy: ${t.lock.waiting} tasks wait on it (a slow disk holds it), ` +
      `at most ${max} of them a ${what}; try again once it has caught up`, { reason: 'correlation_busy', correlation_id: t.id, waiting: t.lock.waiting, max })
    this.name = 'LockBusyError'
  }
}

/** Whether the lock can take one more task of a kind of which `held` are queued already. */
function room (t: CorrTrack, held: number, max: number): boolean {
  return t.lock.busy === 0 || (held < max && t.lock.waiting < EVENTS_LOCK_WAITING_MAX)
}

/**
 * Place a sync answer with `place` (which queues on the lock at once, before
 * it awaits anything), within EVENTS_LOCK_SYNCS_MAX of the correlation, or
 * throw LockBusyError (counted) without placing anything.
 */
export async function placeSynced<T> (t: CorrTrack, stats: EventsStats, place: () => Promise<T>): Promise<T> {
  if (!room(t, t.lockSyncs, EVENTS_LOCK_SYNCS_MAX)) {
    stats.lockRefused.sync++
    throw new LockBusyError(t, 'sync', EVENTS_LOCK_SYNCS_MAX)
  }
  t.lockSyncs++
  try {
    return await place()
  } finally {
    t.lockSyncs--
  }
}

/** Run a subscription's handover on the lock, within EVENTS_LOCK_READERS_MAX, or throw LockBusyError (counted). */
export async function readLocked<T> (t: CorrTrack, stats: EventsStats, fn: () => Promise<T>): Promise<T> {
  if (!room(t, t.lockReaders, EVENTS_LOCK_READERS_MAX)) {
    stats.lockRefused.subscribe++
    throw new LockBusyError(t, 'subscribe', EVENTS_LOCK_READERS_MAX)
  }
  return queueReader(t, fn)
}

/**
 * Run a catch-up pull on the lock; while EVENTS_LOCK_READERS_MAX wait (or the
 * lock is that far behind), first wait for it to run what waits on it now
 * (counted once per pull). Nothing runs when `gone` says the reader left meanwhile.
 */
export async function pullLocked (t: CorrTrack, stats: EventsStats | undefined, gone: () => boolean, fn: () => Promise<void>): Promise<void> {
  let counted = false
  while (!room(t, t.lockReaders, EVENTS_LOCK_READERS_MAX)) {
    if (!counted && stats !== undefined) stats.lockRefused.pull++
    counted = true
    await t.lock.idle()
    if (gone()) return
  }
  await queueReader(t, fn)
}

async function queueReader<T> (t: CorrTrack, fn: () => Promise<T>): Promise<T> {
  t.lockReaders++
  let started = false
  try {
    return await t.lock.run(async () => {
      // counted while it waits: once it runs, it holds the lock and queues nothing behind
      started = true
      t.lockReaders--
      return fn()
    })
  } finally {
    if (!started) t.lockReaders--
  }
}
