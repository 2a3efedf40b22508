/**
 * The MCP tools of `aap-mesh mcp`: each one a call on the running node's
 * local API (src/api/client.ts), its input schema built from the API's
 * document in protocols/ (request bodies and parameters, `$ref`s inlined), so
 * the tools accept exactly what the API does.
 */
import { readFileSync } from 'node:fs'
import type { ApiClient, QueryValue } from '../api/client.ts'
import { MCP_EVENTS_MAX, MCP_EVENTS_WAIT_DEFAULT_MS, MCP_EVENTS_WAIT_MAX_MS } from './constants.ts'
import { AapError, isErrorCode } from '../errors.ts'

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

/** An object schema of an operation's path and query parameters and the fields of its JSON body. */
function inputSchema (method: string, path: string, extra: Record<string, Schema> = {}): Schema {
  const op = operation(method, path)
  const properties: Record<string, unknown> = {}
  const required: string[] = []
  for (const p of op.parameters ?? []) {
    if (p.in !== 'path' && p.in !== 'query') continue
    properties[p.name] = { ...(inline(p.schema) as Schema), ...(p.description === undefined ? {} : { description: p.description }) }
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
  run: (client: ApiClient, args: Record<string, unknown>) => Promise<unknown>
}

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
    run: async (c, a) => c.call('GET', '/v1/discover', undefined, query(a, queryNames('get', '/v1/discover')))
  },
  {
    name: 'delegate',
    description: DESCRIBE('post', '/v1/delegate', 'delegate work to a mesh agent'),
    inputSchema: inputSchema('post', '/v1/delegate'),
    run: async (c, a) => c.call('POST', '/v1/delegate', a)
  },
  {
    name: 'get_run',
    description: DESCRIBE('get', '/v1/runs/{run_id}', 'a run as its executor has it'),
    inputSchema: inputSchema('get', '/v1/runs/{run_id}'),
    run: async (c, a) => c.call('GET', `/v1/runs/${seg(a.run_id)}`)
  },
  {
    name: 'list_runs',
    description: DESCRIBE('get', '/v1/runs', 'runs this node executes and delegated'),
    inputSchema: inputSchema('get', '/v1/runs'),
    run: async (c, a) => c.call('GET', '/v1/runs', undefined, query(a, queryNames('get', '/v1/runs')))
  },
  {
    name: 'resume',
    description: DESCRIBE('post', '/v1/runs/{run_id}/resume', 'resume a blocked run with a resolution'),
    inputSchema: inputSchema('post', '/v1/runs/{run_id}/resume'),
    run: async (c, a) => c.call('POST', `/v1/runs/${seg(a.run_id)}/resume`, pick(a, bodyFields('post', '/v1/runs/{run_id}/resume')))
  },
  {
    name: 'cancel',
    description: DESCRIBE('post', '/v1/runs/{run_id}/cancel', 'cancel a run this agent delegated'),
    inputSchema: inputSchema('post', '/v1/runs/{run_id}/cancel'),
    run: async (c, a) => c.call('POST', `/v1/runs/${seg(a.run_id)}/cancel`, pick(a, bodyFields('post', '/v1/runs/{run_id}/cancel')))
  },
  {
    name: 'events',
    description: 'The run events of a correlation: those the node holds or can sync, then new ones for up to wait_ms, ' +
      `or until an event of type \`until\` (at most ${MCP_EVENTS_MAX}); \`ended_by\` says which (waited, until, max_events, ` +
      'or stream_closed when the node closed the stream first); a stream the node ends with an error is an error result. ' + DESCRIBE('get', '/v1/events/{correlation_id}/stream', ''),
    inputSchema: inputSchema('get', '/v1/events/{correlation_id}/stream', {
      wait_ms: { type: 'integer', minimum: 0, maximum: MCP_EVENTS_WAIT_MAX_MS, description: `how long to wait for new events after the history (default ${MCP_EVENTS_WAIT_DEFAULT_MS})` },
      until: { type: 'string', enum: ['run.started', 'run.progress', 'run.blocked', 'run.completed', 'run.failed'], description: 'stop after the first event of this type' }
    }),
    run: async (c, a) => collectEvents(c, a)
  },
  {
    name: 'replay',
    description: DESCRIBE('get', '/v1/events/{correlation_id}/replay', 'the whole lifecycle of a correlation'),
    inputSchema: inputSchema('get', '/v1/events/{correlation_id}/replay'),
    run: async (c, a) => c.call('GET', `/v1/events/${seg(a.correlation_id)}/replay`, undefined, query(a, queryNames('get', '/v1/events/{correlation_id}/replay')))
  }
]

async function collectEvents (c: ApiClient, a: Record<string, unknown>): Promise<unknown> {
  const waitMs = typeof a.wait_ms === 'number' ? a.wait_ms : MCP_EVENTS_WAIT_DEFAULT_MS
  const ctl = new AbortController()
  const overall = setTimeout(() => { ctl.abort() }, waitMs + MCP_EVENTS_WAIT_MAX_MS)
  const events: Array<Record<string, unknown>> = []
  let timer: NodeJS.Timeout | undefined
  let reason = 'waited'
  try {
    const stream = c.stream(`/v1/events/${seg(a.correlation_id)}/stream`, { ...query(a, queryNames('get', '/v1/events/{correlation_id}/stream')) }, { signal: ctl.signal })
    for await (const ev of stream) {
      if (ev.event === 'ready') {
        timer ??= setTimeout(() => { ctl.abort() }, waitMs)
        continue
      }
      if (ev.event === 'error') {
        // the node ended the stream with a typed error: the tool's caller learns it, not a short list
        const e = (ev.data as { error?: { code?: unknown, message?: unknown } } | undefined)?.error
        throw new AapError(isErrorCode(e?.code) ? e.code : 'INTERNAL', typeof e?.message === 'string' ? e.message : 'the event stream ended with an error')
      }
      if (!ev.event.startsWith('run.')) continue
      events.push(ev.data as Record<string, unknown>)
      if (a.until !== undefined && ev.event === a.until) { reason = 'until'; break }
      if (events.length >= MCP_EVENTS_MAX) { reason = 'max_events'; break }
    }
    // the stream ended with neither of this tool's own reasons: the node closed it
    if (reason === 'waited' && !ctl.signal.aborted) reason = 'stream_closed'
  } finally {
    clearTimeout(timer)
    clearTimeout(overall)
    ctl.abort()
  }
  return { correlation_id: a.correlation_id, events, ended_by: reason }
}
