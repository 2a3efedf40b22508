/**
 * What a check can end with besides a pass (CheckFailure, Undecided,
 * CapacityRefusal), and how the kit writes what the target said into a
 * message or evidence: cleaned and cut (clean, errorText).
 */
import type { Frame } from '../wire/raw.ts'
import { printable } from '../util/text.ts'
import { KIT_EVIDENCE_MAX_CHARS, KIT_MAX_SYNC_PAGES, KIT_RUNS_PER_DELEGATOR_NEEDED } from './constants.ts'

/** A check found the target wrong. */
export class CheckFailure extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'CheckFailure'
  }
}

export interface Evidence {
  runs: string[]
  events: string[]
  frames: string[]
  notes: string[]
}

/**
 * The check could not show anything either way (the target refused a run for
 * capacity, or answered a read the check needs with an error frame).
 * Reported as inconclusive (UNDECIDED), with the cause, not as a failure of
 * the check's clauses; an undecided MUST clause still makes the kit exit 1.
 */
export class Undecided extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'Undecided'
  }
}

/** The target refused a run for capacity (DELEGATION_REFUSED, `details.reason: capacity`): the check is undecided. */
export class CapacityRefusal extends Undecided {
  constructor (message: string) {
    super(message)
    this.name = 'CapacityRefusal'
  }
}

/**
 * Text the target wrote, made safe to print (util/text.ts printable) and
 * bounded: cut to `max` characters.
 */
export function clean (text: string, max = KIT_EVIDENCE_MAX_CHARS): string {
  const safe = printable(text.length > max * 2 ? text.slice(0, max * 2) : text)
  return safe.length > max ? `${safe.slice(0, max - 1)}…` : safe
}

export function short (v: unknown): string {
  // JSON.stringify(undefined) is undefined, not a string
  return clean(typeof v === 'string' ? v : JSON.stringify(v) ?? String(v))
}

/** `code: message` of an error frame, each part as the target wrote it, cleaned and cut. */
export function errorText (frame: Frame): string {
  return `${short(frame.error?.code ?? '?')}: ${short(frame.error?.message ?? '')}`
}

/** A DELEGATION_REFUSED frame or error that says the target is at its limit of runs. */
export function isCapacityRefusal (code: unknown, details: unknown): boolean {
  return code === 'DELEGATION_REFUSED' && typeof details === 'object' && details !== null && (details as Record<string, unknown>).reason === 'capacity'
}

export function capacityMessage (what: string, said: string): string {
  return `${what}: the target refused the run for capacity (DELEGATION_REFUSED, reason capacity): its concurrent-run limit per delegator is too low for the kit, which needs ${KIT_RUNS_PER_DELEGATOR_NEEDED}; the target said ${said}`
}

/** A read whose last allowed page (KIT_MAX_SYNC_PAGES) still said more: it fails the check that made it (protocols/conformance.md). */
export function pastPageBound (what: string): CheckFailure {
  return new CheckFailure(`${what}: the target still claims more events after ${KIT_MAX_SYNC_PAGES} pages (KIT_MAX_SYNC_PAGES)`)
}

export function expect (cond: boolean, message: string): asserts cond {
  if (!cond) throw new CheckFailure(message)
}
