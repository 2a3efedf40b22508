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
 * - a subscription's history handover (readLocked) and an iterator's next
 *   page (pullLocked): past EVENTS_LOCK_READERS_MAX (or with the gossip bound
 *   full) they wait aside for the lock to run what waits on it, not on it,
 *   and then queue. Once it has, only the readers' own count keeps them
 *   aside: gossip refills its bound as fast as the disk drains it, and must
 *   not keep readers out for as long as a flood lasts. A subscription that
 *   finds no room within EVENTS_SUBSCRIBE_BUSY_WAIT_MS (or whose caller's
 *   signal aborts) is refused with LockBusyError (TIMEOUT, reason
 *   correlation_busy); a pull that has waited that long queues at the next
 *   drain whatever the count (it is one per subscription).
 *
 * Events of this node's own runs never wait beyond the bound either
 * (local-events.ts). Every refusal is counted in stats.lockRefused.
 */
import { AapError } from '../errors.ts'
import { EVENTS_LOCK_READERS_MAX, EVENTS_LOCK_SYNCS_MAX, EVENTS_LOCK_WAITING_MAX, EVENTS_SUBSCRIBE_BUSY_WAIT_MS } from './constants.ts'
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

/**
 * Whether a reader can queue: within EVENTS_LOCK_READERS_MAX, and within the
 * gossip bound unless it has waited for the lock to drain once already.
 */
function readerRoom (t: CorrTrack, drained: boolean): boolean {
  return t.lock.busy === 0 || (t.lockReaders < EVENTS_LOCK_READERS_MAX && (drained || t.lock.waiting < EVENTS_LOCK_WAITING_MAX))
}

/** How a reader's wait aside ends early: the reader left (its subscription closed), or its caller's signal aborted. */
export interface ReaderExit {
  gone: () => boolean
  signal?: AbortSignal
}

/**
 * Run a subscription's handover on the lock. Without room, it waits aside for
 * the lock to drain, at most EVENTS_SUBSCRIBE_BUSY_WAIT_MS, and is then
 * refused with LockBusyError (counted). Nothing runs when the reader left
 * meanwhile (the caller sees its subscription closed).
 */
export async function readLocked (t: CorrTrack, stats: EventsStats, exit: ReaderExit, fn: () => Promise<void>): Promise<void> {
  if (!readerRoom(t, false)) {
    stats.subscribeWaited++
    const deadline = Date.now() + EVENTS_SUBSCRIBE_BUSY_WAIT_MS
    for (;;) {
      const drained = await drainOrDeadline(t, deadline, exit.signal)
      if (exit.gone() || exit.signal?.aborted === true) return
      // a drain lets the reader in past gossip's bound; only the readers' own count keeps it aside
      if (drained && readerRoom(t, true)) break
      if (Date.now() >= deadline) {
        stats.lockRefused.subscribe++
        throw new LockBusyError(t, 'subscribe', EVENTS_LOCK_READERS_MAX)
      }
    }
  }
  await queueReader(t, fn)
}

/**
 * Run a catch-up pull on the lock; without room, first wait aside for the
 * lock to run what waits on it now (counted once per pull). After a drain
 * only the readers' own count keeps it aside, and past
 * EVENTS_SUBSCRIBE_BUSY_WAIT_MS of waiting not even that: it queues at the
 * next drain. Nothing runs when `gone` says the reader left meanwhile.
 */
export async function pullLocked (t: CorrTrack, stats: EventsStats | undefined, gone: () => boolean, fn: () => Promise<void>): Promise<void> {
  if (!readerRoom(t, false)) {
    if (stats !== undefined) stats.lockRefused.pull++
    const deadline = Date.now() + EVENTS_SUBSCRIBE_BUSY_WAIT_MS
    do {
      await t.lock.idle()
      if (gone()) return
    } while (!readerRoom(t, true) && Date.now() < deadline)
  }
  await queueReader(t, fn)
}

/**
 * Wait for the lock to run what waits on it now; true once it has, false when
 * `deadline` passes or `signal` aborts first. The timer and listener go with it.
 */
async function drainOrDeadline (t: CorrTrack, deadline: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted === true) return false
  const stop = Promise.withResolvers<boolean>()
  const timer = setTimeout(() => { stop.resolve(false) }, Math.max(0, deadline - Date.now()))
  const onAbort = (): void => { stop.resolve(false) }
  signal?.addEventListener('abort', onAbort, { once: true })
  try {
    return await Promise.race([t.lock.idle().then(() => true), stop.promise])
  } finally {
    clearTimeout(timer)
    signal?.removeEventListener('abort', onAbort)
  }
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
