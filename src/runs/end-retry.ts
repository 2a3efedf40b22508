/**
 * An executor's ending of a run (complete, fail) that the store refused
 * (STORAGE_FULL: a full or failing disk) is written again, at growing
 * intervals, while the run still runs here. A run whose ending was never
 * written stayed running for good: no handler left to end it, its slot held
 * for its delegator, and the delegator's liveness probes finding a live
 * executor. The retries end when the write lands, when the run ends by other
 * means (`active` turns false), or when `signal` aborts (the node stops; its
 * restart's recovery then fails the run). A retry comes early when the store
 * takes a write again (storeRecovered): a fault that has cleared does not
 * hold the run, and its delegator's slot, for the rest of an interval.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { refusedByStore, storeRecovered } from '../storage/write-guard.ts'
import type { Logger } from '../logger.ts'
import { RUN_WRITE_RETRY_MAX_MS, RUN_WRITE_RETRY_MIN_MS } from './constants.ts'

export interface EndingRetry {
  runId: string
  /** The run still runs here: its ending is still this node's to write. */
  active: () => boolean
  signal: AbortSignal
  log: Logger
}

/** `write()`, again while it fails with STORAGE_FULL and the run is active; any other failure (or the last) is thrown. */
export async function writeEnding<T> (write: () => Promise<T>, o: EndingRetry): Promise<T> {
  for (let delay = RUN_WRITE_RETRY_MIN_MS; ; delay = Math.min(delay * 2, RUN_WRITE_RETRY_MAX_MS)) {
    try {
      return await write()
    } catch (err) {
      if (!refusedByStore(err) || !o.active() || o.signal.aborted) throw err
      o.log.warn({ err, run_id: o.runId, retry_ms: delay }, 'the end of a run could not be written: it is written again')
      // the timer, or the store taking a write again (whichever comes first): a run's slot is not held for up to a
      // whole interval after the fault has cleared
      const waited = new AbortController()
      const stop = AbortSignal.any([o.signal, waited.signal])
      try {
        await Promise.race([sleep(delay, undefined, { signal: stop, ref: false }), storeRecovered(err, stop)].filter(p => p !== undefined))
      } catch {
        // the timer's only failure is its abort: stopping; the run stays running on disk, and the restart's recovery ends it
        throw err
      } finally {
        waited.abort()
      }
      if (o.signal.aborted) throw err
    }
  }
}
