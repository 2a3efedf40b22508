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
/** Every definition a validator was made for (module load makes most of them). */
const refs = new Set<string>()

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
  refs.add(ref)
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

/**
 * Compile every validator made so far. Ajv compiles a definition on its
 * first use, which takes from a few to a couple of hundred milliseconds
 * each (all of them: about half a second here) and holds the event loop
 * meanwhile: without this, the first requests of each kind a node answered
 * waited for it. A node calls this as it starts, before it serves anyone.
 * Returns how many were compiled now.
 */
export function compileSchemas (): number {
  let n = 0
  for (const ref of refs) {
    if (cache.has(ref)) continue
    compiled(ref)
    n++
  }
  return n
}

/** Validators made but not compiled yet. */
export function uncompiledSchemas (): number {
  let n = 0
  for (const ref of refs) if (!cache.has(ref)) n++
  return n
}
