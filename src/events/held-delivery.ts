/**
 * A run of this node's that waited for its ancestor (lineage 'pending') is
 * in the log already, whatever its place: once admitted (placement.ts wake),
 * its subscribers are handed what the log holds of it, read on the
 * correlation's lock. Until that read is done the run is marked
 * (RunTrack.heldDelivery): its events taken in meanwhile (placement.ts
 * applyLocal, queued on the lock ahead of the read) are left to the read,
 * which finds them in the log since the run store commits an event before
 * it tells. Before, such an event reached a live subscriber ahead of the
 * run's earlier ones, and the subscription failed (INTERNAL, reason order).
 * A read that fails ends the live subscriptions it left behind (they
 * re-subscribe; their history comes from the log) and clears the mark.
 */
import { AapError, toAapError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { EventLog } from '../runlog/event-log.ts'
import type { CorrTrack, RunTrack } from './track.ts'

/** Hand `t`'s subscribers what the log holds of `rt`, a run of this node's that was just admitted. */
export function deliverHeld (t: CorrTrack, rt: RunTrack, log: Pick<EventLog, 'readAll'>, logger: Logger): void {
  if (t.subs.size === 0) return
  rt.heldDelivery = true
  void t.lock.run(async () => {
    try {
      for await (const page of log.readAll(rt.run_id)) for (const e of page) for (const s of t.subs) s.deliver(e)
    } catch (err) {
      // the run's events taken in while the read waited went to nobody: the live subscriptions behind are ended
      const at = rt.head?.seq ?? 0
      const cause = toAapError(err)
      for (const s of [...t.subs]) {
        if (s.catchingUp || s.position(rt.run_id) >= at) continue
        s.fail(new AapError('INTERNAL', `events of ${rt.run_id} could not be read from the log for the subscribers of ${t.id}: ${cause.message}`,
          { reason: 'log_read', run_id: rt.run_id }, { cause: err }))
      }
      throw err
    } finally {
      // cleared within the task: the run's events queued behind it are delivered as they come
      rt.heldDelivery = false
    }
  }).catch((err: unknown) => {
    logger.warn({ err, correlation_id: t.id, run_id: rt.run_id }, 'an admitted run could not be read for its subscribers')
  })
}
