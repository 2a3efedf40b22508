/**
 * Reading the query strings of the API's routes, and what they change in an
 * answer: the correlation hints of the events routes, and whether cards carry
 * their transport address.
 */
import { parseCapability, type AgentCard } from '../card/card.ts'
import { InvalidRequestError } from '../errors.ts'
import type { PageRequest, RunFilter, TraceContext } from '../runs/runtime.ts'
import { spanContextOf } from '../runs/trace.ts'
import { TRACEPARENT_MAX_CHARS, TRACESTATE_MAX_CHARS } from '../constants.ts'
import type { RunState } from '../runlog/types.ts'
import { isSinceInstant } from './since.ts'

/**
 * A card as an L2 caller gets it: without its `endpoint`, since the profile
 * keeps transport addresses below L2; operators ask for it with
 * `addresses=true`.
 */
export function cardView (card: AgentCard, addresses: boolean): Omit<AgentCard, 'endpoint'> & { endpoint?: string } {
  if (addresses) return card
  const { endpoint: _endpoint, ...view } = card
  return view
}
/** The correlation hints of the events routes: the owner, and the participants and runs the caller knows of. */
function strings (v: unknown): string[] {
  return Array.isArray(v) ? v.filter((s): s is string => typeof s === 'string') : []
}

export function correlationHints (q: Record<string, unknown>): { owner?: string, participants?: string[], runs?: string[] } {
  const participants = strings(q.participant)
  const runs = strings(q.run)
  return {
    ...(typeof q.owner === 'string' ? { owner: q.owner } : {}),
    ...(participants.length > 0 ? { participants } : {}),
    ...(runs.length > 0 ? { runs } : {})
  }
}

/** What a request's W3C trace context headers give: the context to continue, or why they were set aside. */
export interface TraceHeaders {
  trace?: TraceContext
  /** Set when a traceparent was sent but could not be used; the request goes on as if it had none. */
  ignored?: 'bad_traceparent'
}

/**
 * The W3C trace context headers of a request, read as the processing model of
 * W3C Trace Context says (https://www.w3.org/TR/trace-context/#processing-model):
 * a traceparent that does not parse is not an error of the request; it and its
 * tracestate are set aside and the call goes on without them (a new trace when
 * an SDK records). A traceparent of a later version is read by its first four
 * fields (its first TRACEPARENT_MAX_CHARS characters, followed by "-" if there
 * is more) and goes on as version 00. A tracestate longer than
 * TRACESTATE_MAX_CHARS keeps its first list-members that fit.
 */
export function traceHeaders (req: { headers: Record<string, unknown> }): TraceHeaders {
  const header = req.headers.traceparent
  if (typeof header !== 'string') return {}
  const traceparent = traceparentOf(header.trim())
  if (traceparent === undefined) return { ignored: 'bad_traceparent' }
  const state = req.headers.tracestate
  const tracestate = typeof state === 'string' ? fitTracestate(state) : ''
  const trace: TraceContext = tracestate.length > 0 ? { traceparent, tracestate } : { traceparent }
  return spanContextOf(trace) === undefined ? { ignored: 'bad_traceparent' } : { trace }
}

/** A traceparent header as version 00, or undefined when it cannot be read (version ff, too short, a later version not followed by "-"). */
function traceparentOf (header: string): string | undefined {
  const version = header.slice(0, 2)
  if (version === '00') return header.length === TRACEPARENT_MAX_CHARS ? header : undefined
  if (!/^[0-9a-f]{2}$/.test(version) || version === 'ff' || header.length < TRACEPARENT_MAX_CHARS) return undefined
  if (header.length > TRACEPARENT_MAX_CHARS && header[TRACEPARENT_MAX_CHARS] !== '-') return undefined
  return `00${header.slice(2, TRACEPARENT_MAX_CHARS)}`
}

/** A tracestate's leading list-members that fit in TRACESTATE_MAX_CHARS (all of it when it fits). */
function fitTracestate (tracestate: string): string {
  if (tracestate.length <= TRACESTATE_MAX_CHARS) return tracestate
  let kept = ''
  for (const member of tracestate.split(',').map(m => m.trim()).filter(m => m.length > 0)) {
    const next = kept.length === 0 ? member : `${kept},${member}`
    if (next.length > TRACESTATE_MAX_CHARS) break
    kept = next
  }
  return kept
}

/** The filter and page of GET /v1/runs (the document's schemas have checked each parameter). */
export function runListQuery (q: Record<string, unknown>): { filter: RunFilter, page: PageRequest } {
  const filter: RunFilter = {}
  if (typeof q.state === 'string') filter.state = q.state as RunState
  if (typeof q.correlation_id === 'string') filter.correlation_id = q.correlation_id
  if (typeof q.agent === 'string') filter.agent = q.agent
  if (typeof q.capability === 'string') filter.capability = parseCapability(q.capability)
  if (typeof q.since === 'string') filter.since = sinceOf(q.since)
  if (q.side === 'executing' || q.side === 'delegated') filter.side = q.side
  const page: PageRequest = {}
  if (q.order === 'oldest' || q.order === 'newest') page.order = q.order
  if (typeof q.cursor === 'string') page.cursor = q.cursor
  if (typeof q.limit === 'number') page.limit = q.limit
  return { filter, page }
}

/** A `since` the run index can order by (since.ts says what is refused). */
function sinceOf (since: string): string {
  if (!isSinceInstant(since)) {
    throw new InvalidRequestError(`since ${JSON.stringify(since)} is not an instant from year 0000 to 9999 (RFC 3339, e.g. 2026-01-31T12:00:00Z)`, { reason: 'bad_since' })
  }
  return since
}
