/**
 * An executor's events folded into this node's record of a run it delegated
 * (store.ts foldOutgoing, liveness.ts), checked against the Run schema: the
 * event schema bounds a payload only as a whole, so a signed run.failed with
 * a failure code the Run schema refuses, or a run.blocked whose checkpoint id
 * or reason is past its limit (protocols/control.md), would otherwise be
 * written into the record and served (found by session 60's review; the same
 * values in a get_run answer were refused).
 */
import type { AgentEvent, Run } from '../runlog/types.ts'
import { isRun } from './messages.ts'
import { foldEvent } from './state-machine.ts'

/** `prev` with `events` folded in, up to the first whose outcome breaks the Run schema (`refused` is told of it). */
export function foldChecked (prev: Run, events: AgentEvent[], refused: (e: AgentEvent) => void): Run {
  let next = prev
  for (const e of events) {
    const folded = foldEvent(next, e)
    if (folded !== next && !isRun(folded)) {
      refused(e)
      return next
    }
    next = folded
  }
  return next
}

/**
 * `ended` (the record of a run an executor's event ended) when it meets the
 * Run schema; else the same end without what broke it: a completed run's
 * output, or a failure the executor named in a form the schema refuses.
 */
export function checkedEnd (ended: Run, refused: () => void): Run {
  // checked as what came from the wire (the guard would narrow `ended` itself away)
  const record: unknown = ended
  if (isRun(record)) return ended
  refused()
  return ended.state === 'completed'
    ? { ...ended, output: null }
    : { ...ended, failure: { code: 'INVALID_REQUEST', message: 'the executor ended the run with a failure this node could not record' } }
}
