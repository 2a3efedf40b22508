/** The shape of a check and the run set-ups several checks share. */
import type { Run } from '../runlog/types.ts'
import { CheckFailure, expect, type Scope, type WireEvent } from './kit.ts'

export interface Check {
  id: string
  /** What it does, for the report. */
  title: string
  run: (s: Scope) => Promise<void>
}

/** A run of the target held running by its agent. */
export async function heldRun (s: Scope, name: string): Promise<Run> {
  const run = s.runOf(await s.delegate(name, { op: 'hold' }), `delegate ${name} (hold)`)
  expect(run.state === 'running', `a held run is ${run.state}, not running`)
  return run
}

/** A run of the target blocked by its agent on `checkpoint`, once run.blocked is served (`authorized`: the agents the delegation names, the coordinator by default). */
export async function blockedRun (s: Scope, name: string, checkpoint: string, op = 'block', authorized?: string[]): Promise<{ run: Run, blocked: WireEvent }> {
  const run = s.runOf(await s.delegate(name, { op, checkpoint, reason: `conformance ${name}` }, authorized === undefined ? {} : { authorized }), `delegate ${name} (${op})`)
  const blocked = await s.waitType(run.run_id, 'run.blocked')
  return { run, blocked }
}

/** End a run the check no longer needs (the delegator cancels it, a cleanup: no evidence of the check); a refusal is noted, not hidden. */
export async function release (s: Scope, runId: string): Promise<void> {
  const f = await s.control(s.n.delegator, 'cancel', { run_id: runId, reason: 'conformance check done' }, { cleanup: true })
  if (!f.ok) s.note(`cleanup: cancel of ${runId} answered ${f.error?.code ?? '?'}`)
}

export function payloadOf (e: WireEvent): Record<string, unknown> {
  return typeof e.payload === 'object' && e.payload !== null ? e.payload : {}
}

export function deepEqual (a: unknown, b: unknown): boolean {
  return JSON.stringify(canon(a)) === JSON.stringify(canon(b))
}

function canon (v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canon)
  if (typeof v === 'object' && v !== null) {
    return Object.fromEntries(Object.keys(v).sort().map(k => [k, canon((v as Record<string, unknown>)[k])]))
  }
  return v
}

export function fail (message: string): never {
  throw new CheckFailure(message)
}
