/**
 * Conversations with an agent (protocols/turns.md). A context is the
 * executor's durable record of one caller's conversation: its turns (runs,
 * oldest first) and the agent's saved context. A delegation that names an
 * earlier run (`continue_run`) or a context (`context_id`) starts the next
 * turn; every other run is the first turn of a context named by its own run
 * id, so any run can be continued later. Only the caller that delegated the
 * turns continues them (contexts are keyed by delegator), turns are taken one
 * at a time (the latest must have ended), and earlier turns stay read-only.
 */
import { Key, type Datastore } from 'interface-datastore'
import { CONTEXT_MAX_TURNS, CONTEXT_STATE_MAX_BYTES } from '../constants.ts'
import { DelegationRefusedError, InvalidRequestError, InvalidTransitionError, RunNotFoundError, UnauthorizedError } from '../errors.ts'
import { executorOfRun } from '../runlog/event.ts'
import { isTerminal, type Run } from '../runlog/types.ts'
import { readJson } from '../storage/read.ts'
import { KeyedMutex } from '../util/concurrency.ts'
import { assertPayloadValueDepth, type WireDelegate } from './messages.ts'
import { CONTEXT_CONVERSATION_MAX_BYTES } from './constants.ts'
import type { RunStore } from './store.ts'
import type { Conversation, TurnView } from './types.ts'

const enc = new TextEncoder()

const contextKey = (delegator: string, contextId: string): Key =>
  new Key(`/aap/contexts/${encodeURIComponent(delegator)}/${encodeURIComponent(contextId)}`)

export interface ContextRecord {
  context_id: string
  delegator: string
  correlation_id: string
  /** The turns' run ids, oldest first. */
  turns: string[]
  /** The agent's saved context (ctx.saveContext), null until it saves one. */
  saved: Record<string, unknown> | null
  updated_at: string
}

/** The turn a delegation starts, and the context record as it will be with it. */
export interface TurnPlan {
  context_id: string
  turn: number
  previous_turn: string | null
  record: ContextRecord
}

/** A batch entry that writes a context record (with the run that changes it). */
export function contextEntry (record: ContextRecord): { key: Key, value: Uint8Array } {
  return { key: contextKey(record.delegator, record.context_id), value: enc.encode(JSON.stringify(record)) }
}

/** The context a run is a turn of: its own record's, or (a first turn delegated without one) its run id. */
export function contextIdOf (run: Run): string {
  return run.context_id ?? run.run_id
}

/** True when `run` is a turn of the conversation `rec` keeps. */
function listsRun (rec: ContextRecord, run: Run): boolean {
  return rec.correlation_id === run.correlation_id && rec.turns.includes(run.run_id)
}

export class Contexts {
  private readonly ds: Datastore
  private readonly store: RunStore
  private readonly self: string
  private readonly locks = new KeyedMutex()

  constructor (ds: Datastore, store: RunStore, self: string) {
    this.ds = ds
    this.store = store
    this.self = self
  }

  /**
   * Plan the turn a delegation from `from` starts, under its context's lock,
   * and create the run with it (`create` gets undefined when the delegation
   * names no earlier turn and no context: a first turn of its own).
   */
  async withTurn<T> (req: WireDelegate, from: string, runId: string, create: (plan: TurnPlan | undefined) => Promise<T>): Promise<T> {
    if (req.continue_run === undefined && req.context_id === undefined) return create(undefined)
    let contextId = req.context_id
    let prev: Run | undefined
    if (req.continue_run !== undefined) {
      prev = executorOfRun(req.continue_run) === this.self ? await this.store.get(req.continue_run) : undefined
      if (prev === undefined) throw new RunNotFoundError(`no run ${req.continue_run.slice(0, 160)} to continue on agent ${this.self}`, { run_id: req.continue_run.slice(0, 128) })
      if (prev.delegator !== from) throw new UnauthorizedError('only the agent that delegated a conversation continues it', { reason: 'not_context_owner' })
      if (contextId !== undefined && contextId !== contextIdOf(prev)) throw new InvalidRequestError('continue_run is a turn of another context', { reason: 'context_mismatch' })
      contextId = contextIdOf(prev)
    }
    const id = contextId ?? ''
    return this.locks.run(`${from}\n${id}`, async () => {
      const now = new Date().toISOString()
      // a first turn delegated without a context: named by its run id from now on, whether continued by that run
      // (continue_run) or by its name (context_id)
      const first = prev ?? await this.ownFirstTurn(from, id)
      const rec = await this.get(from, id) ??
        (first === undefined
          ? { context_id: id, delegator: from, correlation_id: req.task_id, turns: [], saved: null, updated_at: now }
          : { context_id: id, delegator: from, correlation_id: first.correlation_id, turns: [first.run_id], saved: null, updated_at: now })
      if (rec.correlation_id !== req.task_id) {
        throw new InvalidRequestError(`the turns of context ${id} belong to task ${rec.correlation_id}`, { reason: 'turn_correlation' })
      }
      const latest = rec.turns.at(-1)
      if (prev !== undefined && latest !== prev.run_id) {
        throw new InvalidTransitionError('earlier turns are read-only: continue the latest turn of the context', { reason: 'not_latest_turn', latest: latest ?? null })
      }
      if (latest !== undefined) {
        const last = await this.store.get(latest)
        if (last !== undefined && !isTerminal(last.state)) {
          throw new InvalidTransitionError(`the turn before (${latest.slice(0, 160)}) has not ended`, { reason: 'turn_in_progress', run_id: latest.slice(0, 128) })
        }
      }
      if (rec.turns.length >= CONTEXT_MAX_TURNS) {
        throw new DelegationRefusedError(`context ${id} has ${rec.turns.length} turns; at most ${CONTEXT_MAX_TURNS}`, { reason: 'context_full', max: CONTEXT_MAX_TURNS })
      }
      return create({
        context_id: id,
        turn: rec.turns.length + 1,
        previous_turn: latest ?? null,
        record: { ...rec, turns: [...rec.turns, runId], updated_at: now }
      })
    })
  }

  /** The run of this executor that `from` delegated as a first turn of its own (its context named by its run id), if `id` is one. */
  private async ownFirstTurn (from: string, id: string): Promise<Run | undefined> {
    if (executorOfRun(id) !== this.self) return undefined
    const run = await this.store.get(id)
    return run !== undefined && run.delegator === from && run.context_id === undefined ? run : undefined
  }

  async get (delegator: string, contextId: string): Promise<ContextRecord | undefined> {
    return readJson<ContextRecord>(this.ds, contextKey(delegator, contextId))
  }

  /**
   * What the handler of `run` sees of its conversation: the earlier turns,
   * oldest first, and the saved context. `fresh`: the run was just created,
   * and without continue_run or context_id it is the first turn of a
   * conversation of its own, named by its run id: nothing earlier, nothing
   * saved yet, so there is no record to read. The earlier turns shown are the
   * newest that fit in CONTEXT_CONVERSATION_MAX_BYTES of JSON together (read
   * newest first, one at a time): the older ones are left out, and the first
   * shown turn's number says how many.
   */
  async conversation (run: Run, fresh = false): Promise<Conversation> {
    const rec = fresh && run.context_id === undefined ? undefined : await this.ownRecord(run)
    const ids = rec?.turns ?? [run.run_id]
    const earlier = ids.slice(0, Math.max(0, ids.indexOf(run.run_id)))
    const turns: TurnView[] = []
    let bytes = 0
    for (let i = earlier.length - 1; i >= 0; i--) {
      const view = await this.turnView(earlier[i] ?? '', i + 1)
      if (view === undefined) continue
      bytes += Buffer.byteLength(JSON.stringify(view))
      if (bytes > CONTEXT_CONVERSATION_MAX_BYTES) break
      turns.push(view)
    }
    return { context_id: contextIdOf(run), turn: run.turn ?? 1, previous_turn: run.previous_turn ?? null, turns: turns.reverse(), saved: rec?.saved ?? null }
  }

  /** An earlier turn as its next turns see it (undefined: its run is not in the store). */
  private async turnView (id: string, turn: number): Promise<TurnView | undefined> {
    const r = await this.store.get(id)
    if (r === undefined) return undefined
    const started = await this.store.log.get(id, 1)
    const input = started?.payload.input
    return {
      run_id: id,
      turn,
      input: typeof input === 'object' && input !== null && !Array.isArray(input) ? input as Record<string, unknown> : {},
      state: r.state,
      output: r.output,
      failure: r.failure
    }
  }

  /**
   * The record of the conversation `run` is a turn of, if it lists the run. A
   * record of that name that does not is another conversation's: a run whose
   * id its ticket's issuer (a delegator, a handoff's sender) chose to be the
   * name of a context of the same delegator. Such a run never reads it.
   */
  private async ownRecord (run: Run): Promise<ContextRecord | undefined> {
    const rec = await this.get(run.delegator, contextIdOf(run))
    return rec !== undefined && listsRun(rec, run) ? rec : undefined
  }

  /**
   * The agent saves its context of the conversation `run` is a turn of; kept durably for the next turns. The
   * executor calls it under the run's lock with the run as it is now, so a turn canceled or ended while its
   * handler still ran is refused (turn_ended), not written for the next turn to read.
   */
  async save (run: Run, saved: Record<string, unknown>): Promise<void> {
    // checked before it is encoded, as every other value of an agent is: JSON.stringify recurses, so thousands of
    // levels ran it out of stack (an INTERNAL), and a context past the bound would reach later turns' handlers
    assertPayloadValueDepth(saved, 'context')
    const size = Buffer.byteLength(JSON.stringify(saved))
    if (size > CONTEXT_STATE_MAX_BYTES) {
      throw new InvalidRequestError(`a saved context is ${size} bytes, over ${CONTEXT_STATE_MAX_BYTES}`, { reason: 'oversized', max: CONTEXT_STATE_MAX_BYTES })
    }
    if (isTerminal(run.state)) throw new InvalidTransitionError('a turn that ended cannot change its context', { reason: 'turn_ended' })
    const id = contextIdOf(run)
    await this.locks.run(`${run.delegator}\n${id}`, async () => {
      const now = new Date().toISOString()
      const found = await this.get(run.delegator, id)
      // another conversation's record under the run's name (ownRecord): its memory is not this run's to write
      if (found !== undefined && !listsRun(found, run)) {
        throw new InvalidRequestError(`context ${id} is another conversation's: run ${run.run_id} is no turn of it, and cannot save into it`, { reason: 'context_taken' })
      }
      const rec = found ??
        { context_id: id, delegator: run.delegator, correlation_id: run.correlation_id, turns: [run.run_id], saved: null, updated_at: now }
      const { key, value } = contextEntry({ ...rec, saved, updated_at: now })
      await this.ds.put(key, value)
    })
  }
}
