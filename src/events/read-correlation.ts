/**
 * A correlation's events as this node holds them, for a replay: each run's
 * log from seq 1, its chain checked, within a bound on what is read into
 * memory (REPLAY_MAX_BYTES): a correlation may hold up to
 * EVENTS_MAX_RUNS_PER_CORRELATION runs of EVENTS_MAX_EVENTS_PER_RUN events.
 */
import { InvalidRequestError } from '../errors.ts'
import { checkChain } from '../runlog/event.ts'
import type { EventLog } from '../runlog/event-log.ts'
import type { AgentEvent } from '../runlog/types.ts'

/** run_id -> events from seq 1; INVALID_REQUEST (reason replay_too_large) past `maxBytes` of events as JSON. */
export async function readCorrelation (log: EventLog, correlationId: string, maxBytes: number): Promise<Map<string, AgentEvent[]>> {
  const out = new Map<string, AgentEvent[]>()
  let bytes = 0
  for (const runId of (await log.runsOf(correlationId)).sort()) {
    const events: AgentEvent[] = []
    for await (const page of log.readAll(runId)) {
      // bytes as the bound says (UTF-8), not UTF-16 code units: a page of non-ASCII text is up to three times its length
      for (const e of page) bytes += Buffer.byteLength(JSON.stringify(e))
      if (bytes > maxBytes) {
        throw new InvalidRequestError(`the events held of correlation ${correlationId.slice(0, 128)} are over ${maxBytes} bytes: too many to replay at once`, {
          reason: 'replay_too_large', max_bytes: maxBytes
        })
      }
      events.push(...page)
    }
    checkChain(events, undefined)
    out.set(runId, events)
  }
  return out
}
