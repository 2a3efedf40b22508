/**
 * Validation against the machine-readable schemas in protocols/. The JSON
 * Schema files are the source of truth; this module only compiles them.
 */
import { Ajv, type ValidateFunction } from 'ajv'
import common from '../../protocols/common.schema.json' with { type: 'json' }
import card from '../../protocols/card.schema.json' with { type: 'json' }
import runs from '../../protocols/runs.schema.json' with { type: 'json' }
import events from '../../protocols/events.schema.json' with { type: 'json' }
import artifact from '../../protocols/artifact.schema.json' with { type: 'json' }
import { InvalidRequestError } from '../errors.ts'

const ajv = new Ajv({ allErrors: false, strict: true, allowUnionTypes: true })
ajv.addSchema([common, card, runs, events, artifact])

const cache = new Map<string, ValidateFunction>()

function compiled (ref: string): ValidateFunction {
  let fn = cache.get(ref)
  if (fn === undefined) {
    fn = ajv.getSchema(ref)
    if (fn === undefined) throw new Error(`no schema ${ref}`)
    cache.set(ref, fn)
  }
  return fn
}

export interface Validator<T> {
  (value: unknown): value is T
  /** Returns the value typed, or throws INVALID_REQUEST naming the first violation. */
  assert: (value: unknown, what?: string) => T
  ref: string
}

/** A validator for one definition, e.g. `schema<AgentCard>('aap:card#/definitions/AgentCard')`. */
export function schema<T> (ref: string): Validator<T> {
  const check = ((value: unknown): value is T => compiled(ref)(value) === true) as Validator<T>
  check.ref = ref
  check.assert = (value: unknown, what = ref): T => {
    const fn = compiled(ref)
    if (fn(value) === true) return value as T
    const first = fn.errors?.[0]
    const where = first?.instancePath === '' || first?.instancePath === undefined ? '' : ` at ${first.instancePath}`
    throw new InvalidRequestError(`${what} does not match its schema${where}: ${first?.message ?? 'invalid'}`, {
      schema: ref,
      path: first?.instancePath ?? ''
    })
  }
  return check
}
