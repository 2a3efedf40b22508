/**
 * The top-level shape of each API answer a command reads, checked before it
 * is read: a node (or something else on its port) that answers `{}` or
 * `null` where the API sends a list or a run is not the API, and the command
 * says so (ApiAnswerBrokenError, exit 3) instead of printing "undefined",
 * exiting 0 with nothing, or failing on a TypeError.
 */
import { ApiAnswerBrokenError, type ApiClient } from '../api/client.ts'

/** What one field of an answer must be. */
export type FieldKind = 'string' | 'number' | 'boolean' | 'object' | 'array' | 'string|null' | 'object|null'

function kindOf (value: unknown): string {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'array'
  return typeof value
}

function fits (value: unknown, kind: FieldKind): boolean {
  return kind.split('|').includes(kindOf(value))
}

/**
 * `value` as a T when it is an object whose fields are of the kinds `fields`
 * names; else ApiAnswerBrokenError naming `what` (the request) and the first
 * field that is not.
 */
export function shaped<T> (client: ApiClient, what: string, value: unknown, fields: Record<string, FieldKind>): T {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ApiAnswerBrokenError(client.url, `the node's answer to ${what} is ${kindOf(value)}, not an object: it is not the API's`)
  }
  for (const [name, kind] of Object.entries(fields)) {
    const got = (value as Record<string, unknown>)[name]
    if (!fits(got, kind)) throw new ApiAnswerBrokenError(client.url, `the node's answer to ${what} has "${name}" ${got === undefined ? 'missing' : `as ${kindOf(got)}`}, not ${kind}: it is not the API's`)
  }
  return value as T
}

/** The fields of a run that the commands read. */
const RUN_FIELDS: Record<string, FieldKind> = { run_id: 'string', state: 'string', agent_id: 'string', correlation_id: 'string' }

/** An answer `{ run }` (runs show, delegate, block, resume, cancel, handoff) with a run in it. */
export function runAnswer<T extends { run: unknown }> (client: ApiClient, what: string, value: unknown): T {
  const r = shaped<T>(client, what, value, { run: 'object' })
  shaped(client, what, r.run, RUN_FIELDS)
  return r
}

/** One JSON call whose answer must have `fields`. */
export async function callShaped<T> (client: ApiClient, method: string, path: string, fields: Record<string, FieldKind>, body?: unknown, query?: Parameters<ApiClient['call']>[3]): Promise<T> {
  return shaped<T>(client, `${method} ${path}`, await client.call<unknown>(method, path, body, query), fields)
}

/** One JSON call whose answer is `{ run }`. */
export async function callRun<T extends { run: unknown }> (client: ApiClient, method: string, path: string, body?: unknown): Promise<T> {
  return runAnswer<T>(client, `${method} ${path}`, await client.call<unknown>(method, path, body))
}
