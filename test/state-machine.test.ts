/**
 * The run state machine, exhaustively: every state x command x actor role.
 * The expected outcome of each case comes from the table below, written from
 * the profile and protocols/control.md, not from the implementation.
 */
import { describe, expect, it } from 'vitest'
import { foldEvent, transition } from '../src/runs/state-machine.ts'
import { RUN_STATES, type AgentEvent, type Run, type RunState } from '../src/runlog/types.ts'
import { type Actor, type RunCommand } from '../src/runs/types.ts'

const EXECUTOR = '12D3KooWExecutorExecutorExecutorExecutorExecutor1'
const DELEGATOR = '12D3KooWDelegatorDelegatorDelegatorDelegatorDele'
const AUTHORIZED = '12D3KooWAuthorizedAuthorizedAuthorizedAuthorized'
const STRANGER = '12D3KooWStrangerStrangerStrangerStrangerStranger'
const NOW = '2026-06-20T10:00:00.000Z'

type Role = Actor['role']
const ROLES: Role[] = ['executor', 'delegator', 'authorized', 'other']

function actor (role: Role): Actor {
  switch (role) {
    case 'executor': return { role }
    case 'delegator': return { role, agent_id: DELEGATOR }
    case 'authorized': return { role, agent_id: AUTHORIZED }
    case 'other': return { role, agent_id: STRANGER }
  }
}

function runIn (state: RunState): Run {
  return {
    run_id: `${EXECUTOR}:0011223344556677`,
    agent_id: EXECUTOR,
    correlation_id: 'task-sm-1',
    state,
    created_at: '2026-06-20T09:00:00.000Z',
    updated_at: '2026-06-20T09:30:00.000Z',
    capability: { capability_id: 'cap:code-review', version: '2.1.0' },
    delegator: DELEGATOR,
    authorized: [AUTHORIZED],
    parent_run: null,
    handoff_from: null,
    handoff_to: null,
    checkpoint_id: state === 'blocked' ? 'cp-open' : null,
    block_reason: state === 'blocked' ? 'waiting for a human' : null,
    output: state === 'completed' ? { ok: true } : null,
    failure: state === 'failed' ? { code: 'HANDLER_FAILED', message: 'boom' } : null,
    last_seq: 3
  }
}

const HANDOFF_TO = { run_id: '12D3KooWReceiverReceiverReceiverReceiverReceiver:aa', agent_id: '12D3KooWReceiverReceiverReceiverReceiverReceiver' }

/** Every command, plus a block without a checkpoint id. */
const COMMANDS: Record<string, RunCommand> = {
  progress: { type: 'progress', payload: { step: 1 } },
  block: { type: 'block', reason: 'needs a human', checkpoint_id: 'cp-7' },
  'block without checkpoint_id': { type: 'block', reason: 'needs a human', checkpoint_id: '' },
  resume: { type: 'resume', resolution: { approved: true } },
  complete: { type: 'complete', output: { verdict: 'ok' } },
  fail: { type: 'fail', code: 'HANDLER_FAILED', message: 'it broke' },
  cancel: { type: 'cancel', reason: 'no longer needed' },
  handoff: { type: 'handoff', to: HANDOFF_TO }
}

interface Rule { actors: Role[], from: RunState[], to: RunState }
/** Who may do what from where (protocols/control.md, "State machine"). */
const RULES: Record<string, Rule> = {
  progress: { actors: ['executor'], from: ['running'], to: 'running' },
  block: { actors: ['executor', 'delegator', 'authorized'], from: ['running'], to: 'blocked' },
  'block without checkpoint_id': { actors: ['executor', 'delegator', 'authorized'], from: [], to: 'blocked' },
  resume: { actors: ['delegator', 'authorized'], from: ['blocked'], to: 'running' },
  complete: { actors: ['executor'], from: ['running'], to: 'completed' },
  fail: { actors: ['executor'], from: ['running', 'blocked'], to: 'failed' },
  cancel: { actors: ['delegator', 'authorized'], from: ['running', 'blocked'], to: 'failed' },
  handoff: { actors: ['executor', 'delegator', 'authorized'], from: ['running', 'blocked'], to: 'completed' }
}

type Expected = { ok: true, to: RunState } | { ok: false, code: 'INVALID_TRANSITION' | 'UNAUTHORIZED' }

function expected (state: RunState, name: string, role: Role): Expected {
  const rule = RULES[name]!
  if (state === 'completed' || state === 'failed') return { ok: false, code: 'INVALID_TRANSITION' }
  // the profile words this one as a transition error: a blocked run must not resume itself
  if (name === 'resume' && role === 'executor') return { ok: false, code: 'INVALID_TRANSITION' }
  if (!rule.actors.includes(role)) return { ok: false, code: 'UNAUTHORIZED' }
  // handed on by its executor, a blocked run would go on elsewhere before it is resumed
  if (name === 'handoff' && role === 'executor' && state === 'blocked') return { ok: false, code: 'INVALID_TRANSITION' }
  if (!rule.from.includes(state)) return { ok: false, code: 'INVALID_TRANSITION' }
  return { ok: true, to: rule.to }
}

function deepFreeze<T> (v: T): T {
  if (typeof v === 'object' && v !== null) {
    for (const x of Object.values(v)) deepFreeze(x)
    Object.freeze(v)
  }
  return v
}

describe('run state machine: every state x command x actor', () => {
  let cases = 0
  for (const state of RUN_STATES) {
    for (const [name, command] of Object.entries(COMMANDS)) {
      for (const role of ROLES) {
        const want = expected(state, name, role)
        cases++
        it(`${state} x ${name} x ${role} -> ${want.ok ? want.to : want.code}`, () => {
          const before = deepFreeze(runIn(state))
          const snapshot = structuredClone(before)
          const out = transition(before, command, actor(role), NOW)
          // pure: the input is untouched, the same inputs give the same answer
          expect(before).toEqual(snapshot)
          expect(transition(before, command, actor(role), NOW)).toEqual(out)
          if (!want.ok) {
            expect(out.ok).toBe(false)
            if (out.ok) return
            expect(out.error.code).toBe(want.code)
            expect(out.error.details).toMatchObject({ run_id: before.run_id, command: command.type })
            return
          }
          expect(out.ok).toBe(true)
          if (!out.ok) return
          const { run, event } = out.result
          expect(run.state).toBe(want.to)
          expect(run.updated_at).toBe(NOW)
          // identity and correlation never change in a transition
          expect(run.run_id).toBe(before.run_id)
          expect(run.correlation_id).toBe(before.correlation_id)
          expect(run.delegator).toBe(before.delegator)
          expect(run.created_at).toBe(before.created_at)
          checkEffect(name, command, before, run, event)
        })
      }
    }
  }
  it('covers 4 states x 8 commands x 4 roles', () => {
    expect(cases).toBe(RUN_STATES.length * Object.keys(COMMANDS).length * ROLES.length)
    expect(cases).toBe(128)
  })
})

function checkEffect (name: string, command: RunCommand, before: Run, run: Run, event: { type: string, payload: Record<string, unknown> }): void {
  switch (name) {
    case 'progress':
      expect(event).toEqual({ type: 'run.progress', payload: { step: 1 } })
      break
    case 'block':
      expect(run.checkpoint_id).toBe('cp-7')
      expect(run.block_reason).toBe('needs a human')
      expect(event.type).toBe('run.blocked')
      expect(event.payload).toMatchObject({ checkpoint_id: 'cp-7', reason: 'needs a human' })
      break
    case 'resume':
      expect(run.block_reason).toBeNull()
      expect(event.type).toBe('run.progress')
      // the resolution and the checkpoint it resolves are one logical transition
      expect(event.payload).toMatchObject({ transition: 'resume', checkpoint_id: before.checkpoint_id, resolution: { approved: true } })
      break
    case 'complete':
      expect(run.output).toEqual({ verdict: 'ok' })
      expect(event).toEqual({ type: 'run.completed', payload: { output: { verdict: 'ok' } } })
      break
    case 'fail':
      expect(run.failure).toEqual({ code: 'HANDLER_FAILED', message: 'it broke' })
      expect(event.type).toBe('run.failed')
      break
    case 'cancel':
      expect(run.failure).toEqual({ code: 'CANCELED', message: 'no longer needed' })
      expect(event.type).toBe('run.failed')
      expect(event.payload).toMatchObject({ reason: 'canceled', failure: { code: 'CANCELED' } })
      break
    case 'handoff':
      expect(run.handoff_to).toEqual(HANDOFF_TO)
      expect(event.type).toBe('run.completed')
      expect(event.payload).toMatchObject({ transition: 'handoff', handoff_to: HANDOFF_TO })
      break
    default:
      throw new Error(`no effect check for ${name} (${command.type})`)
  }
}

describe('run state machine: the rules the profile names', () => {
  it('a terminal run is read-only: no command by anyone changes it', () => {
    for (const state of ['completed', 'failed'] as const) {
      for (const command of Object.values(COMMANDS)) {
        for (const role of ROLES) {
          const out = transition(runIn(state), command, actor(role), NOW)
          expect(out.ok ? 'changed' : out.error.code).toBe('INVALID_TRANSITION')
        }
      }
    }
  })

  it('a blocked run cannot resume itself: the executor gets INVALID_TRANSITION, the run stays blocked', () => {
    const out = transition(runIn('blocked'), COMMANDS.resume!, actor('executor'), NOW)
    expect(out.ok).toBe(false)
    if (!out.ok) {
      expect(out.error.code).toBe('INVALID_TRANSITION')
      expect(out.error.message).toMatch(/must not resume itself/)
    }
  })

  it('cancel ends in failed with reason canceled, from running and from blocked', () => {
    for (const state of ['running', 'blocked'] as const) {
      const out = transition(runIn(state), COMMANDS.cancel!, actor('delegator'), NOW)
      expect(out.ok).toBe(true)
      if (!out.ok) continue
      expect(out.result.run.state).toBe('failed')
      expect(out.result.run.failure?.code).toBe('CANCELED')
      expect(out.result.event.payload.reason).toBe('canceled')
      expect(out.result.event.payload.by).toBe(DELEGATOR)
    }
  })

  it('a block without checkpoint_id is refused for every actor and leaves the run running', () => {
    for (const role of ['executor', 'delegator', 'authorized'] as const) {
      const out = transition(runIn('running'), COMMANDS['block without checkpoint_id']!, actor(role), NOW)
      expect(out.ok ? 'blocked' : out.error.code).toBe('INVALID_TRANSITION')
    }
  })

  it('a run handed back to its delegator (its delegator is its executor) blocks only when it names an authorized agent', () => {
    // nobody else could resume it: the executor may not resume its own run
    const handedBack: Run = { ...runIn('running'), delegator: EXECUTOR, authorized: [] }
    const refused = transition(handedBack, { type: 'block', reason: 'r', checkpoint_id: 'cp-1' }, actor('executor'), NOW)
    expect(refused.ok ? 'blocked' : refused.error.code).toBe('INVALID_TRANSITION')
    if (!refused.ok) expect(refused.error.message).toMatch(/nobody could resume it/)
    const withHelper = transition({ ...handedBack, authorized: [AUTHORIZED] }, { type: 'block', reason: 'r', checkpoint_id: 'cp-1' }, actor('executor'), NOW)
    if (!withHelper.ok) throw withHelper.error
    const resumed = transition(withHelper.result.run, { type: 'resume', resolution: { ok: true } }, actor('authorized'), NOW)
    expect(resumed.ok && resumed.result.run.state).toBe('running')
  })

  it('a run blocked, resumed and blocked again carries the newest checkpoint', () => {
    let run = runIn('running')
    for (const cp of ['cp-a', 'cp-b']) {
      const b = transition(run, { type: 'block', reason: 'r', checkpoint_id: cp }, actor('executor'), NOW)
      if (!b.ok) throw b.error
      expect(b.result.run.checkpoint_id).toBe(cp)
      const r = transition(b.result.run, { type: 'resume', resolution: { cp } }, actor('authorized'), NOW)
      if (!r.ok) throw r.error
      expect(r.result.event.payload).toMatchObject({ checkpoint_id: cp, resolution: { cp }, by: AUTHORIZED })
      run = r.result.run
    }
    expect(run.state).toBe('running')
  })
})

describe('run state machine: a holder folding the executor\'s events', () => {
  /** The executor's signed event (the signature is not the fold's business: events are verified before). */
  function event (type: AgentEvent['type'], payload: Record<string, unknown>, seq = 4): AgentEvent {
    return { run_id: runIn('running').run_id, correlation_id: 'task-sm-1', type, payload, at: NOW, seq, prev: 'h', executor: EXECUTOR, signature: 's' }
  }
  const resume = (by: string): AgentEvent => event('run.progress', { transition: 'resume', checkpoint_id: 'cp-open', resolution: { approved: true }, by })
  const handoff = (by: string): AgentEvent => event('run.completed', { transition: 'handoff', handoff_to: HANDOFF_TO, by })

  it('takes a resume by the delegator or an agent it authorized', () => {
    for (const by of [DELEGATOR, AUTHORIZED]) {
      const run = foldEvent(runIn('blocked'), resume(by))
      expect([run.state, run.last_seq]).toEqual(['running', 4])
    }
  })

  it('does not take a resume by the executor itself or by a stranger: the view stays blocked', () => {
    for (const by of [EXECUTOR, STRANGER]) {
      const before = runIn('blocked')
      expect(foldEvent(before, resume(by))).toEqual(before)
    }
  })

  it('does not take a cancel the executor says it made', () => {
    const before = runIn('running')
    const cancel = event('run.failed', { failure: { code: 'CANCELED', message: 'x' }, reason: 'canceled', by: EXECUTOR })
    expect(foldEvent(before, cancel)).toEqual(before)
    expect(foldEvent(before, { ...cancel, payload: { ...cancel.payload, by: DELEGATOR } }).state).toBe('failed')
  })

  it('takes a blocked run handed on by its delegator, and follows one its executor handed on (the run ended there)', () => {
    const before = runIn('blocked')
    expect(foldEvent(before, handoff(DELEGATOR)).handoff_to).toEqual(HANDOFF_TO)
    // the executor may not (transition refuses it), but an executor that did (older nodes) ended the run: the holder
    // follows it to its successor rather than wait on a run that never moves
    expect(transition(before, COMMANDS.handoff!, actor('executor'), NOW).ok).toBe(false)
    expect(foldEvent(before, handoff(EXECUTOR))).toMatchObject({ state: 'completed', handoff_to: HANDOFF_TO, last_seq: 4 })
    // a running run, handed on by its executor, as before
    expect(foldEvent(runIn('running'), handoff(EXECUTOR)).state).toBe('completed')
  })

  it('takes a delegator\'s liveness verdict (a failure that names the delegator)', () => {
    const verdict = event('run.failed', { failure: { code: 'EXECUTOR_LOST', message: 'gone' }, reason: 'executor_lost', by: DELEGATOR, after_seq: 3 })
    expect(foldEvent(runIn('blocked'), { ...verdict, declared_by: DELEGATOR }).state).toBe('failed')
  })
})
