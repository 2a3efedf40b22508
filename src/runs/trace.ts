/**
 * Trace context of the run protocols: W3C `traceparent`/`tracestate`
 * (https://www.w3.org/TR/trace-context/) carried in the optional `trace`
 * field of delegate, control and handoff requests and in the run.started
 * event's payload, with spans through `@opentelemetry/api`.
 *
 * Without an SDK registered by the operator the API is a no-op: spans record
 * nothing, and a span started under a remote parent keeps the parent's ids,
 * so a trace context that comes in goes on unchanged to the runs and calls it
 * leads to. With an SDK (and an exporter), each node adds its spans:
 *
 *  - `aap.delegate`, `aap.control.<verb>` (client): a call this node makes;
 *  - `aap.delegate.accept`, `aap.handoff.accept`, `aap.control.<verb>.handle`
 *    (server): a call it answers. The span that accepts a run is the run's
 *    own trace context: stored in its run.started payload, it is the parent
 *    of what the run leads to (sub-delegations naming it as `parent_run`,
 *    its handoff, control calls on it).
 *
 * The parent of a call this node makes is, in order: an explicit trace
 * context, the active OpenTelemetry context (with a context manager of an
 * SDK), the trace context of the run the call is about (its parent run for a
 * delegation), or none (a new trace, when an SDK records).
 */
import {
  context, createTraceState, isSpanContextValid, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace,
  type Context, type Span, type SpanContext
} from '@opentelemetry/api'
import pkg from '../../package.json' with { type: 'json' }
import { TRACEPARENT_MAX_CHARS, TRACESTATE_MAX_CHARS } from '../constants.ts'
import { InvalidRequestError } from '../errors.ts'
import { makeRoom } from '../util/bounded.ts'
import { RUN_TRACES_REMEMBERED_MAX, TRACESTATE_MAX_MEMBERS } from './constants.ts'
import type { Logger } from '../logger.ts'
import type { EventLog } from '../runlog/event-log.ts'

/** The wire form (protocols/common.schema.json#/definitions/TraceContext). */
export interface TraceContext {
  traceparent: string
  tracestate?: string
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

function tracer (): ReturnType<typeof trace.getTracer> {
  return trace.getTracer('aap-mesh', pkg.version)
}

/** The span context a wire trace context names, or undefined when it is absent or not valid. */
export function spanContextOf (tc: TraceContext | undefined): SpanContext | undefined {
  if (tc === undefined || tc.traceparent.length > TRACEPARENT_MAX_CHARS) return undefined
  const m = TRACEPARENT.exec(tc.traceparent)
  if (m === null || m[1] === 'ff') return undefined
  const sc: SpanContext = { traceId: m[2] as string, spanId: m[3] as string, traceFlags: parseInt(m[4] as string, 16) & 1, isRemote: true }
  if (tc.tracestate !== undefined && tc.tracestate.length > 0 && tc.tracestate.length <= TRACESTATE_MAX_CHARS) sc.traceState = createTraceState(firstMembers(tc.tracestate))
  return isSpanContextValid(sc) ? sc : undefined
}

/** A tracestate's first TRACESTATE_MAX_MEMBERS list-members, in their order (empty members, which W3C allows, dropped). */
function firstMembers (tracestate: string): string {
  const members = tracestate.split(',').map(m => m.trim()).filter(m => m.length > 0)
  return members.slice(0, TRACESTATE_MAX_MEMBERS).join(',')
}

/** The wire form of a span's context (undefined when it has none, as a root no-op span). */
export function wireOf (span: Span): TraceContext | undefined {
  const sc = span.spanContext()
  if (!isSpanContextValid(sc)) return undefined
  const flags = (sc.traceFlags & 0xff).toString(16).padStart(2, '0')
  const tc: TraceContext = { traceparent: `00-${sc.traceId}-${sc.spanId}-${flags}` }
  const state = sc.traceState?.serialize()
  if (state !== undefined && state.length > 0 && state.length <= TRACESTATE_MAX_CHARS) tc.tracestate = state
  return tc
}

/** A context whose parent is the wire trace context (ROOT when there is none). */
export function contextOf (tc: TraceContext | undefined): Context {
  const sc = spanContextOf(tc)
  return sc === undefined ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, sc)
}

/**
 * The trace contexts of the delegations this node made lately, by run id: a
 * delegator that does not follow a run holds no copy of its run.started, and
 * its control calls on the run continue this trace instead of starting one.
 * In memory, the last RUN_TRACES_REMEMBERED_MAX (a restart forgets them).
 */
export class RecentTraces {
  private readonly byRun = new Map<string, TraceContext>()

  remember (runId: string, tc: TraceContext | undefined): void {
    if (tc === undefined) return
    this.byRun.delete(runId)
    makeRoom(this.byRun, RUN_TRACES_REMEMBERED_MAX)
    this.byRun.set(runId, tc)
  }

  get (runId: string | null | undefined): TraceContext | undefined {
    return runId === null || runId === undefined ? undefined : this.byRun.get(runId)
  }
}

/** The trace context of a run, as its run.started event recorded it (this node's copy of the log). */
export async function runTrace (log: EventLog, runId: string | null | undefined): Promise<TraceContext | undefined> {
  if (runId === null || runId === undefined) return undefined
  const started = await log.get(runId, 1)
  const tc = started?.payload.trace as TraceContext | undefined
  if (tc === null || typeof tc !== 'object' || typeof tc.traceparent !== 'string') return undefined
  return spanContextOf(tc) === undefined ? undefined : tc
}

/**
 * The parent of a call this node makes: the explicit trace context, else the
 * active OpenTelemetry span, else the run's (see the file comment).
 */
export async function parentOf (explicit: TraceContext | undefined, log: EventLog, runId: string | null | undefined, recent?: RecentTraces): Promise<Context> {
  if (explicit !== undefined) {
    if (spanContextOf(explicit) === undefined) throw new InvalidRequestError('trace is not a valid W3C trace context (traceparent "00-<32 hex>-<16 hex>-<2 hex>", ids not all zero)', { reason: 'bad_trace' })
    return contextOf(explicit)
  }
  const active = context.active()
  if (trace.getSpanContext(active) !== undefined) return active
  return contextOf(await runTrace(log, runId) ?? recent?.get(runId))
}

/**
 * Run `fn` in a span (ended when `fn` settles; a failure is recorded on it).
 * `fn` gets the span's wire trace context to send or store.
 */
export async function inSpan<T> (
  name: string, kind: 'client' | 'server', parent: Context, attributes: Record<string, string>,
  fn: (tc: TraceContext | undefined) => Promise<T>
): Promise<T> {
  const span = tracer().startSpan(name, { kind: kind === 'client' ? SpanKind.CLIENT : SpanKind.SERVER, attributes }, parent)
  try {
    return await context.with(trace.setSpan(parent, span), async () => fn(wireOf(span)))
  } catch (err) {
    span.recordException(err instanceof Error ? err : String(err))
    span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) })
    throw err
  } finally {
    span.end()
  }
}

/** A wire trace context that came with a request, dropped (and said at debug) when it is not valid. */
export function incoming (tc: TraceContext | undefined, log: Logger): TraceContext | undefined {
  if (tc === undefined) return undefined
  if (spanContextOf(tc) !== undefined) return tc
  log.debug({ traceparent: tc.traceparent.slice(0, TRACEPARENT_MAX_CHARS) }, 'a request carried a trace context that is not valid W3C; traced as a new trace')
  return undefined
}
