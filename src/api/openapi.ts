/**
 * protocols/api.openapi.json is the single source of the local agent API:
 * the server registers one route per documented operation and validates
 * requests with the document's own schemas. This module reads the document
 * and compiles those schemas with ajv.
 *
 * Component schemas that are wire types point at the mesh's JSON Schema
 * files by relative reference (`./runs.schema.json#/definitions/Run`); they
 * are loaded under their `$id` (`aap:runs`) and references are mapped to it.
 * Local references (`#/components/schemas/X`) point into one schema that
 * holds every component under `definitions`. The schemas keep to keywords
 * that mean the same in JSON Schema draft-07 (the wire schemas' dialect) and
 * 2020-12 (OpenAPI 3.1's), so one ajv instance validates both.
 */
import { Ajv, type ValidateFunction } from 'ajv'
import doc from '../../protocols/api.openapi.json' with { type: 'json' }
import card from '../../protocols/card.schema.json' with { type: 'json' }
import common from '../../protocols/common.schema.json' with { type: 'json' }
import events from '../../protocols/events.schema.json' with { type: 'json' }
import runs from '../../protocols/runs.schema.json' with { type: 'json' }
import artifact from '../../protocols/artifact.schema.json' with { type: 'json' }

export const API_SCHEMA_ID = 'aap:api'
const WIRE_FILES: Record<string, string> = {
  './common.schema.json': 'aap:common',
  './card.schema.json': 'aap:card',
  './runs.schema.json': 'aap:runs',
  './events.schema.json': 'aap:events',
  './artifact.schema.json': 'aap:artifact'
}
const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'patch'] as const
export type HttpMethod = typeof HTTP_METHODS[number]

type Json = null | boolean | number | string | Json[] | { [k: string]: Json }
type JsonObject = { [k: string]: Json }

export interface Operation {
  operationId: string
  method: HttpMethod
  /** As documented: `/v1/runs/{run_id}`. */
  path: string
  /** As fastify routes it: `/v1/runs/:run_id`. */
  route: string
  /** Schemas for fastify, references already mapped. */
  schema: {
    params?: JsonObject
    querystring?: JsonObject
    headers?: JsonObject
    body?: JsonObject
  }
  bodyRequired: boolean
  /** The body is raw bytes (application/octet-stream), streamed to the handler unparsed. */
  rawBody: boolean
  /** Documented responses: status (or 'default') -> JSON schema of an application/json body. */
  responses: Map<string, JsonObject>
  /** Documented `text/event-stream` responses: the schema of each `data:` object. */
  sseData?: JsonObject
}

function isObject (v: Json | undefined): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** A deep copy with every `$ref` mapped to the ids ajv knows. */
function mapRefs (value: Json): Json {
  if (Array.isArray(value)) return value.map(mapRefs)
  if (!isObject(value)) return value
  const out: JsonObject = {}
  for (const [k, v] of Object.entries(value)) {
    if (k === '$ref' && typeof v === 'string') out[k] = mapRef(v)
    else out[k] = mapRefs(v)
  }
  return out
}

function mapRef (ref: string): string {
  const local = '#/components/schemas/'
  if (ref.startsWith(local)) return `${API_SCHEMA_ID}#/definitions/${ref.slice(local.length)}`
  const hash = ref.indexOf('#')
  const file = hash < 0 ? ref : ref.slice(0, hash)
  const id = WIRE_FILES[file]
  if (id === undefined) throw new Error(`api.openapi.json: unsupported $ref ${ref}`)
  return id + (hash < 0 ? '' : ref.slice(hash))
}

/** Follow `#/components/...` references of the document itself (responses, parameters). */
function deref (value: Json | undefined): Json | undefined {
  if (!isObject(value) || typeof value.$ref !== 'string' || !value.$ref.startsWith('#/components/') || value.$ref.startsWith('#/components/schemas/')) return value
  let at: Json | undefined = doc as unknown as Json
  for (const part of value.$ref.slice(2).split('/')) at = isObject(at) ? at[part] : undefined
  if (at === undefined) throw new Error(`api.openapi.json: dangling $ref ${value.$ref}`)
  return deref(at)
}

function newAjv (coerce: boolean): Ajv {
  const ajv = new Ajv({
    strict: true,
    allErrors: false,
    allowUnionTypes: true,
    // an API body with an unknown field is an error, never silently trimmed
    removeAdditional: false,
    useDefaults: false,
    // query strings and path parameters are text: "3" is an integer, a lone ?tag=x is an array of one
    coerceTypes: coerce ? 'array' : false
  })
  ajv.addSchema([common, card, runs, events, artifact])
  const components = (doc as unknown as { components: { schemas: JsonObject } }).components.schemas
  ajv.addSchema({ $id: API_SCHEMA_ID, definitions: mapRefs(components) })
  return ajv
}

/** Bodies and responses: types as they are. */
export const bodyAjv = newAjv(false)
/** Parameters (path, query, headers): text coerced to the documented types. */
export const paramAjv = newAjv(true)

function parameterSchema (params: Json[], where: 'path' | 'query' | 'header'): JsonObject | undefined {
  const properties: JsonObject = {}
  const required: Json[] = []
  for (const raw of params) {
    const p = deref(raw)
    if (!isObject(p) || p.in !== where || typeof p.name !== 'string' || p.schema === undefined) continue
    properties[p.name] = mapRefs(p.schema)
    if (p.required === true) required.push(p.name)
  }
  if (Object.keys(properties).length === 0) return undefined
  // headers carry far more than the documented ones; queries and paths are closed
  return { type: 'object', additionalProperties: where === 'header', properties, required }
}

function jsonSchemaOf (content: Json | undefined, type: string): JsonObject | undefined {
  if (!isObject(content)) return undefined
  const media = content[type]
  if (!isObject(media)) return undefined
  const s = type === 'text/event-stream' ? media['x-sse-data'] : media.schema
  return isObject(s) ? mapRefs(s) as JsonObject : undefined
}

function loadOperations (): Operation[] {
  const out: Operation[] = []
  const paths = (doc as unknown as { paths: Record<string, JsonObject> }).paths
  for (const [path, item] of Object.entries(paths)) {
    for (const method of HTTP_METHODS) {
      const op = item[method]
      if (!isObject(op)) continue
      if (typeof op.operationId !== 'string') throw new Error(`api.openapi.json: ${method} ${path} has no operationId`)
      const params = Array.isArray(op.parameters) ? op.parameters : []
      const schema: Operation['schema'] = {}
      const pathParams = parameterSchema(params, 'path')
      const query = parameterSchema(params, 'query')
      const headers = parameterSchema(params, 'header')
      if (pathParams !== undefined) schema.params = pathParams
      if (query !== undefined) schema.querystring = query
      else schema.querystring = { type: 'object', additionalProperties: false, properties: {} }
      if (headers !== undefined) schema.headers = headers
      const requestBody = deref(op.requestBody)
      let bodyRequired = false
      let rawBody = false
      if (isObject(requestBody) && isObject(requestBody.content) && isObject(requestBody.content['application/octet-stream'])) {
        rawBody = true
      } else if (isObject(requestBody)) {
        const body = jsonSchemaOf(requestBody.content, 'application/json')
        if (body === undefined) throw new Error(`api.openapi.json: ${method} ${path} has a body that is not application/json`)
        schema.body = body
        bodyRequired = requestBody.required === true
      }
      const responses = new Map<string, JsonObject>()
      let sseData: JsonObject | undefined
      for (const [status, raw] of Object.entries(isObject(op.responses) ? op.responses : {})) {
        const r = deref(raw)
        if (!isObject(r)) continue
        const json = jsonSchemaOf(r.content, 'application/json')
        if (json !== undefined) responses.set(status, json)
        const sse = jsonSchemaOf(r.content, 'text/event-stream')
        if (sse !== undefined) sseData = sse
      }
      out.push({
        operationId: op.operationId,
        method,
        path,
        route: path.replace(/\{([^}]+)\}/g, ':$1'),
        schema,
        bodyRequired,
        rawBody,
        responses,
        ...(sseData === undefined ? {} : { sseData })
      })
    }
  }
  return out
}

export const operations: readonly Operation[] = loadOperations()

const compiledResponses = new Map<string, ValidateFunction>()

/**
 * The validator of a documented response body: the status's own schema, else
 * the `default` one. Undefined when the operation documents neither.
 */
export function responseValidator (operationId: string, status: number): ValidateFunction | undefined {
  const key = `${operationId} ${status}`
  const cached = compiledResponses.get(key)
  if (cached !== undefined) return cached
  const op = operations.find(o => o.operationId === operationId)
  const s = op?.responses.get(String(status)) ?? op?.responses.get('default')
  if (s === undefined) return undefined
  const fn = bodyAjv.compile(s)
  compiledResponses.set(key, fn)
  return fn
}

/** The validator of an SSE stream's `data:` objects. */
export function sseDataValidator (operationId: string): ValidateFunction | undefined {
  const s = operations.find(o => o.operationId === operationId)?.sseData
  return s === undefined ? undefined : bodyAjv.compile(s)
}

/** The validator of one component schema, e.g. `componentValidator('WorkItem')`. */
export function componentValidator (name: string): ValidateFunction {
  const fn = bodyAjv.getSchema(`${API_SCHEMA_ID}#/definitions/${name}`)
  if (fn === undefined) throw new Error(`api.openapi.json has no component schema ${name}`)
  return fn
}

export const apiDocument: unknown = doc
