/**
 * The MCP tools of `aap-mesh mcp`: each one a call on the running node's
 * local API (src/api/client.ts), its input schema built from the API's
 * document in protocols/ (request bodies and parameters, `$ref`s inlined), so
 * the tools accept exactly what the API does.
 */
import { readFileSync } from 'node:fs'
import { streamFailure, type ApiClient, type QueryValue } from '../api/client.ts'
import {
  MCP_EVENTS_CONCURRENT_MAX, MCP_EVENTS_HISTORY_MAX_MS, MCP_EVENTS_MAX, MCP_EVENTS_WAIT_DEFAULT_MS, MCP_EVENTS_WAIT_MAX_MS, MCP_REPLAY_TIMEOUT_MAX_MS, MCP_RESULT_MARGIN_BYTES,
  MCP_RESULT_MAX_BYTES
} from './constants.ts'
import { AapError } from '../errors.ts'
import type { AgentEvent } from '../runlog/types.ts'
import { isVerdict } from '../runlog/verdict-shape.ts'
import { EVENTS_MAX_EVENTS_PER_RUN, EVENTS_MAX_RUNS_PER_CORRELATION } from '../constants.ts'

type Schema = Record<string, unknown>

interface Parameter { name: string, in: string, required?: boolean, description?: string, schema: Schema }
interface Operation { parameters?: Parameter[], requestBody?: { content: Record<string, { schema: Schema }> }, summary?: string, description?: string }
interface OpenApi { paths: Record<string, Record<string, Operation>>, components: { schemas: Record<string, Schema> } }

function load (file: string): Schema {
  return JSON.parse(readFileSync(new URL(`../../protocols/${file}`, import.meta.url), 'utf8')) as Schema
}

const doc = load('api.openapi.json') as unknown as OpenApi
/** The documents a `$ref` may name: by file (from the API document) and by `$id` (between the schema files). */
const docs = new Map<string, Schema>([['api.openapi.json', doc as unknown as Schema]])
for (const file of ['common.schema.json', 'card.schema.json', 'runs.schema.json', 'events.schema.json']) {
  const d = load(file)
  docs.set(file, d)
  if (typeof d.$id === 'string') docs.set(d.$id, d)
}

function resolve (ref: string, current: string): { schema: Schema, doc: string } {
  const [where = '', pointer = ''] = ref.split('#')
  const name = where === '' ? current : where.replace(/^\.\//, '')
  let node: unknown = docs.get(name)
  for (const key of pointer.split('/').filter(k => k !== '')) node = (node as Schema | undefined)?.[key]
  if (typeof node !== 'object' || node === null) throw new Error(`unresolved schema reference ${ref}`)
  return { schema: node as Schema, doc: name }
}

/** A copy of `s` with every `$ref` (within and across the protocols/ documents) replaced by what it names; they have no cycles. */
function inline (s: unknown, current = 'api.openapi.json', depth = 0): unknown {
  if (depth > 48) throw new Error('schema nesting too deep')
  if (Array.isArray(s)) return s.map(x => inline(x, current, depth + 1))
  if (typeof s !== 'object' || s === null) return s
  const o = s as Schema
  if (typeof o.$ref === 'string') {
    const target = resolve(o.$ref, current)
    const { $ref: _, ...rest } = o
    return { ...(inline(target.schema, target.doc, depth + 1) as Schema), ...(inline(rest, current, depth + 1) as Schema) }
  }
  return Object.fromEntries(Object.entries(o).filter(([k]) => k !== '$id' && k !== '$schema').map(([k, v]) => [k, inline(v, current, depth + 1)]))
}

function operation (method: string, path: string): Operation {
  const op = doc.paths[path]?.[method]
  if (op === undefined) throw new Error(`no ${method.toUpperCase()} ${path} in protocols/api.openapi.json`)
  return op
}

/** The RunId schema of protocols/common.schema.json: the names a cursor (`after`) may hold. */
const RUN_ID = inline(doc.components.schemas.RunId) as Schema

/**
 * What a tool says of a path parameter where the API document's words are
 * about the URL ("URL-encoded run id."): the tool encodes the id itself, and
 * its schema refuses `%`.
 */
const PATH_PARAMETER_DESCRIPTIONS: Record<string, string> = { run_id: 'the run id, as returned' }

/** An object schema of an operation's path and query parameters and the fields of its JSON body. */
function inputSchema (method: string, path: string, extra: Record<string, Schema> = {}): Schema {
  const op = operation(method, path)
  const properties: Record<string, unknown> = {}
  const required: string[] = []
  for (const p of op.parameters ?? []) {
    if (p.in !== 'path' && p.in !== 'query') continue
    const description = (p.in === 'path' ? PATH_PARAMETER_DESCRIPTIONS[p.name] : undefined) ?? p.description
    properties[p.name] = { ...(inline(p.schema) as Schema), ...(description === undefined ? {} : { description }) }
    if (p.required === true || p.in === 'path') required.push(p.name)
  }
  const body = op.requestBody?.content['application/json']?.schema
  if (body !== undefined) {
    const b = inline(body) as Schema
    Object.assign(properties, b.properties as Schema)
    required.push(...((b.required as string[] | undefined) ?? []))
  }
  Object.assign(properties, extra)
  return { type: 'object', properties, required, additionalProperties: false }
}

export interface Tool {
  name: string
  description: string
  inputSchema: Schema
  /** `signal` aborts when the MCP client cancels the call or goes away. */
  run: (client: ApiClient, args: Record<string, unknown>, signal?: AbortSignal) => Promise<unknown>
}

/** A path segment (the schemas refuse ids "." and "..", which no URL path can carry). */
function seg (v: unknown): string {
  return encodeURIComponent(String(v))
}

function query (args: Record<string, unknown>, names: string[]): Record<string, QueryValue> {
  const q: Record<string, QueryValue> = {}
  for (const n of names) if (args[n] !== undefined) q[n] = args[n] as QueryValue
  return q
}

/** The query parameters of an operation, from the OpenAPI document: every one its tool's schema offers is passed on. */
function queryNames (method: string, path: string): string[] {
  return (operation(method, path).parameters ?? []).filter(p => p.in === 'query').map(p => p.name)
}

function pick (args: Record<string, unknown>, names: string[]): Record<string, unknown> {
  return Object.fromEntries(Object.entries(args).filter(([k]) => names.includes(k)))
}

function bodyFields (method: string, path: string): string[] {
  const body = operation(method, path).requestBody?.content['application/json']?.schema
  return body === undefined ? [] : Object.keys((inline(body) as Schema).properties as Schema)
}

const DESCRIBE = (method: string, path: string, fallback: string): string => {
  const op = operation(method, path)
  return [op.summary, op.description].filter(x => typeof x === 'string' && x.length > 0).join(': ') || fallback
}

export const TOOLS: Tool[] = [
  {
    name: 'discover',
    description: DESCRIBE('get', '/v1/discover', 'find mesh agents by capability or tag'),
    inputSchema: inputSchema('get', '/v1/discover'),
    run: async (c, a, signal) => c.call('GET', '/v1/discover', undefined, query(a, queryNames('get', '/v1/discover')), signal)
  },
  {
    name: 'delegate',
    description: DESCRIBE('post', '/v1/delegate', 'delegate work to a mesh agent'),
    inputSchema: inputSchema('post', '/v1/delegate'),
    run: async (c, a, signal) => c.call('POST', '/v1/delegate', a, undefined, signal)
  },
  {
    name: 'get_run',
    description: DESCRIBE('get', '/v1/runs/{run_id}', 'a run as its executor has it'),
    inputSchema: inputSchema('get', '/v1/runs/{run_id}'),
    run: async (c, a, signal) => c.call('GET', `/v1/runs/${seg(a.run_id)}`, undefined, undefined, signal)
  },
  {
    name: 'list_runs',
    description: DESCRIBE('get', '/v1/runs', 'runs this node executes and delegated'),
    inputSchema: inputSchema('get', '/v1/runs'),
    run: async (c, a, signal) => c.call('GET', '/v1/runs', undefined, query(a, queryNames('get', '/v1/runs')), signal)
  },
  {
    name: 'resume',
    description: DESCRIBE('post', '/v1/runs/{run_id}/resume', 'resume a blocked run with a resolution'),
    inputSchema: inputSchema('post', '/v1/runs/{run_id}/resume'),
    run: async (c, a, signal) => c.call('POST', `/v1/runs/${seg(a.run_id)}/resume`, pick(a, bodyFields('post', '/v1/runs/{run_id}/resume')), undefined, signal)
  },
  {
    name: 'cancel',
    description: DESCRIBE('post', '/v1/runs/{run_id}/cancel', 'cancel a run this agent delegated'),
    inputSchema: inputSchema('post', '/v1/runs/{run_id}/cancel'),
    run: async (c, a, signal) => c.call('POST', `/v1/runs/${seg(a.run_id)}/cancel`, pick(a, bodyFields('post', '/v1/runs/{run_id}/cancel')), undefined, signal)
  },
  {
    name: 'events',
    description: 'The run events of a correlation: those the node holds or can sync, then new ones for up to wait_ms, ' +
      `or until an event of type \`until\` (at most ${MCP_EVENTS_MAX} events, ${MCP_RESULT_MAX_BYTES} bytes); \`ended_by\` says which (waited, until, max_events, max_bytes, ` +
      `history_timeout when the history took more than ${MCP_EVENTS_HISTORY_MAX_MS} ms, stream_closed when the node closed the stream first, stream_broken when the connection to the node broke); ` +
      'a stream the node ends with an error is an error result. The result\'s `after` (the highest seq returned of each run, merged with the ' +
      '`after` given) passed to the next call returns only the events after it: what a bound left out comes then. ' +
      'An event with `declared_by` is a liveness verdict of the delegator, which the executor\'s own event at the same seq may still replace ' +
      '(that one stands): it comes after the verdict, in the same call or a later one, since `after` names the seq before a run\'s verdict ' +
      '(the next call returns the replacement, or the verdict again). `skipped_not_objects`, when present, counts events left out ' +
      'because their data was not a JSON object. ' + DESCRIBE('get', '/v1/events/{correlation_id}/stream', ''),
    inputSchema: inputSchema('get', '/v1/events/{correlation_id}/stream', {
      wait_ms: { type: 'integer', minimum: 0, maximum: MCP_EVENTS_WAIT_MAX_MS, description: `how long to wait for new events after the history (default ${MCP_EVENTS_WAIT_DEFAULT_MS})` },
      until: { type: 'string', enum: ['run.started', 'run.progress', 'run.blocked', 'run.completed', 'run.failed'], description: 'stop after the first event of this type' },
      after: {
        type: 'object',
        description: 'run id -> seq: skip the events of each run at or below its seq (the `after` of an earlier result)',
        maxProperties: EVENTS_MAX_RUNS_PER_CORRELATION,
        propertyNames: RUN_ID,
        additionalProperties: { type: 'integer', minimum: 0, maximum: EVENTS_MAX_EVENTS_PER_RUN }
      }
    }),
    run: async (c, a, signal) => collectEvents(c, a, signal)
  },
  {
    name: 'replay',
    description: DESCRIBE('get', '/v1/events/{correlation_id}/replay', 'the whole lifecycle of a correlation') +
      `. A replay over ${MCP_RESULT_MAX_BYTES} bytes of JSON comes without its events (\`events\` and each run's \`events\` left out, ` +
      'each run\'s `events_held` counting them), with `truncated: true` and a `message`: read the events with the `events` tool, which pages.',
    // a wait the MCP client outlasts (it gives up after 60 s by default)
    inputSchema: inputSchema('get', '/v1/events/{correlation_id}/replay', {
      timeout_ms: { type: 'integer', minimum: 0, maximum: MCP_REPLAY_TIMEOUT_MAX_MS, description: `how long the node may collect the events (at most ${MCP_REPLAY_TIMEOUT_MAX_MS})` }
    }),
    run: async (c, a, signal) => fitReplay(await c.call('GET', `/v1/events/${seg(a.correlation_id)}/replay`, undefined, query(a, queryNames('get', '/v1/events/{correlation_id}/replay')), signal))
  }
]

/**
 * A replay an MCP result can carry: the node's whole answer when its JSON is
 * within MCP_RESULT_MAX_BYTES, else the same without its events (the top
 * level's and each run's, whose count stays as `events_held`), marked
 * `truncated`. No argument narrows a replay: the `events` tool pages through
 * the events instead.
 */
function fitReplay (replay: Record<string, unknown>): Record<string, unknown> {
  const bytes = Buffer.byteLength(JSON.stringify(replay))
  if (bytes <= MCP_RESULT_MAX_BYTES) return replay
  const { events: _, runs, ...rest } = replay
  const summary = {
    ...rest,
    runs: (Array.isArray(runs) ? runs as Array<Record<string, unknown>> : []).map(({ events, ...run }) => ({ ...run, events_held: Array.isArray(events) ? events.length : 0 })),
    truncated: true,
    message: `the replay has ${bytes} bytes of JSON, more than an MCP result may (${MCP_RESULT_MAX_BYTES}): its events are left out; ` +
      'read them with the `events` tool (it pages with `after`)'
  }
  const size = Buffer.byteLength(JSON.stringify(summary))
  if (size > MCP_RESULT_MAX_BYTES) {
    throw new AapError('INVALID_REQUEST', `replay: even without its events the replay has ${size} bytes of JSON, more than an MCP result may (${MCP_RESULT_MAX_BYTES}); ` +
      'read the correlation\'s events with the `events` tool (it pages with `after`) and its runs with `list_runs` and `get_run`', { reason: 'result_too_large', bytes: size, max_bytes: MCP_RESULT_MAX_BYTES })
  }
  return summary
}

/** Most bytes one run's entry adds to a cursor's JSON (`"run id":seq,`), its seq at its widest. */
function cursorEntryBytes (runId: string): number {
  return Buffer.byteLength(JSON.stringify(runId)) + 2 + String(EVENTS_MAX_EVENTS_PER_RUN).length
}

/** A liveness verdict (runlog/verdict-shape.ts), which the executor's own event at its seq may replace. */
function verdictIn (data: unknown): boolean {
  return typeof data === 'object' && data !== null && isVerdict(data as AgentEvent)
}

/** `events` calls in progress (each holds one of the node's event streams). */
let eventsInFlight = 0

async function collectEvents (c: ApiClient, a: Record<string, unknown>, signal?: AbortSignal): Promise<unknown> {
  if (eventsInFlight >= MCP_EVENTS_CONCURRENT_MAX) {
    throw new AapError('INVALID_REQUEST', `${MCP_EVENTS_CONCURRENT_MAX} events calls are in progress already; wait for one to end`, { reason: 'too_many_streams', limit: MCP_EVENTS_CONCURRENT_MAX })
  }
  eventsInFlight++
  const waitMs = typeof a.wait_ms === 'number' ? a.wait_ms : MCP_EVENTS_WAIT_DEFAULT_MS
  const ctl = new AbortController()
  const onCancel = (): void => { ctl.abort() }
  signal?.addEventListener('abort', onCancel, { once: true })
  if (signal?.aborted === true) ctl.abort()
  const history = setTimeout(() => { ctl.abort() }, MCP_EVENTS_HISTORY_MAX_MS)
  const events: Array<Record<string, unknown>> = []
  // the cursor: events at or below a run's seq were returned by an earlier call
  const after = new Map<string, number>(Object.entries((a.after ?? {}) as Record<string, number>))
  // runs whose last event returned is a verdict: the executor's own event at that seq may come yet, and replaces it
  const verdicts = new Set<string>()
  // the cursor goes back in the result: its JSON counts against the bound, as each run it takes on does
  let bytes = 2 + [...after.keys()].reduce((n, runId) => n + cursorEntryBytes(runId), 0)
  let timer: NodeJS.Timeout | undefined
  let ready = false
  let reason = 'waited'
  let skipped = 0
  try {
    const stream = c.stream(`/v1/events/${seg(a.correlation_id)}/stream`, { ...query(a, queryNames('get', '/v1/events/{correlation_id}/stream')) }, { signal: ctl.signal })
    try {
      for await (const ev of stream) {
        if (ev.event === 'ready') {
          ready = true
          clearTimeout(history)
          timer ??= setTimeout(() => { ctl.abort() }, waitMs)
          continue
        }
        // the node ended the stream with a typed error: the tool's caller learns it, not a short list
        const failed = streamFailure(ev)
        if (failed !== undefined) throw failed
        if (!ev.event.startsWith('run.')) continue
        // an event that is not an object is no event of the node's: skipped, and counted in the result
        if (typeof ev.data !== 'object' || ev.data === null || Array.isArray(ev.data)) { skipped++; continue }
        const { run_id: runId, seq } = ev.data as { run_id?: unknown, seq?: unknown }
        const run = typeof runId === 'string' && typeof seq === 'number' ? { runId, seq } : undefined
        if (run !== undefined) {
          const last = after.get(run.runId) ?? 0
          // the executor's event at the seq of the verdict returned last replaces it (protocols/events.md): it goes through
          const replaces = run.seq === last && verdicts.has(run.runId) && !verdictIn(ev.data)
          if (run.seq <= last && !replaces) continue
        }
        const kept = run !== undefined && (after.has(run.runId) || after.size < EVENTS_MAX_RUNS_PER_CORRELATION)
        // a result the MCP client can take: what is past the byte bound waits for the next call
        const size = Buffer.byteLength(JSON.stringify(ev.data)) + 1 + (kept && !after.has(run.runId) ? cursorEntryBytes(run.runId) : 0)
        if (bytes + size > MCP_RESULT_MAX_BYTES - MCP_RESULT_MARGIN_BYTES) { reason = 'max_bytes'; break }
        bytes += size
        events.push(ev.data as Record<string, unknown>)
        if (kept) {
          after.set(run.runId, run.seq)
          if (verdictIn(ev.data)) verdicts.add(run.runId)
          else verdicts.delete(run.runId)
        }
        if (a.until !== undefined && ev.event === a.until) { reason = 'until'; break }
        if (events.length >= MCP_EVENTS_MAX) { reason = 'max_events'; break }
      }
    } catch (err) {
      if (signal?.aborted === true) throw new AapError('INVALID_REQUEST', 'the call was cancelled', { reason: 'cancelled' })
      if (ctl.signal.aborted && !ready) {
        // the history's bound passed before the stream even answered
        reason = 'history_timeout'
      } else {
        // a refusal or a typed error of the node is the call's answer; a connection that broke once the stream
        // had started keeps what was read
        if (err instanceof AapError || !(ready || events.length > 0)) throw err
        reason = 'stream_broken'
      }
    }
    if (signal?.aborted === true) throw new AapError('INVALID_REQUEST', 'the call was cancelled', { reason: 'cancelled' })
    // the stream ended with neither of this tool's own reasons: the node closed it, or the history took too long
    if (reason === 'waited' && !ready) reason = ctl.signal.aborted ? 'history_timeout' : 'stream_closed'
    else if (reason === 'waited' && !ctl.signal.aborted) reason = 'stream_closed'
  } finally {
    clearTimeout(timer)
    clearTimeout(history)
    signal?.removeEventListener('abort', onCancel)
    ctl.abort()
    eventsInFlight--
  }
  // a run whose last event returned is a verdict: the cursor stops before it, so the next call returns the executor's
  // event that replaces it (or the verdict again: a verdict twice rather than a completion never seen)
  return {
    correlation_id: a.correlation_id,
    events,
    ended_by: reason,
    after: Object.fromEntries([...after].map(([runId, seq]) => [runId, verdicts.has(runId) ? seq - 1 : seq])),
    ...(skipped === 0 ? {} : { skipped_not_objects: skipped })
  }
}
