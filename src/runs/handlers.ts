/**
 * Running an agent's in-process handler for a run this node executes: the
 * RunContext it sees, and what its return or throw does to the run. The
 * run's state changes only through the executor's `apply`.
 */
import type { Logger } from '../logger.ts'
import { AapError, toAapError } from '../errors.ts'
import { isTerminal, type AgentEvent, type Run } from '../runlog/types.ts'
import { checkParts, type ArtifactWriter } from '../artifacts/types.ts'
import { REASON_MAX_CHARS } from '../constants.ts'
import { FAILURE_MESSAGE_MAX_CHARS } from './constants.ts'
import { assertPayloadValueDepth, isBlock, isRunOutput } from './messages.ts'
import type { Actor, Conversation, OpenCheckpoint, ResolvedCheckpoint, RunCommand, RunContext, RunHandler } from './types.ts'
import { cutText } from '../util/text.ts'
import { canonicalJson } from '../identity/signing.ts'
import { writeEnding, type EndingRetry } from './end-retry.ts'
import type { RunSlots } from './slots.ts'

/** The handler's pending `ctx.block`: resolved by the resume of the block it raised (and only that one). */
export interface BlockWaiter {
  checkpointId: string
  /** Set when the handler's own block is committed; a block someone else raised meanwhile is not it. */
  bound: boolean
  resolve: (resolution: Record<string, unknown>) => void
}

/** The handler's subscriptions to its run's blocks and resumes. */
export interface RunWatch {
  blocked: Set<(checkpoint: OpenCheckpoint) => void>
  resumed: Set<(resolved: ResolvedCheckpoint) => void>
}

/** A run created by an inbound request whose handler starts once the answer is out. */
export interface PendingStart {
  input: Record<string, unknown>
  handoff: RunContext['handedOff']
  /** The delegator can still learn the handle (it set an idempotency key), so an undelivered answer is not fatal. */
  recoverable: boolean
  /** A handoff successor: it starts once the sender confirms (confirmations.ts). */
  confirm?: boolean
}

/** A run this node executes that has not ended: the executor's working state of it. */
export interface Active {
  run: Run
  last?: AgentEvent
  abort: AbortController
  /** The handler's pending `ctx.block`. */
  waiter?: BlockWaiter
  /** Resolves when a blocked run is resumed or ends (handler calls made while blocked wait for it). */
  resumed?: PromiseWithResolvers<void>
  /** True from the handler's start until its outcome is applied (so a resume never starts a second one). */
  handlerRunning: boolean
  /** The handler's function has not returned: a run that ends meanwhile holds its node slot until it does (slots.ts). */
  inHandler?: true
  /** The run was blocked when the node restarted: its handler's memory is gone, so its resume starts the handler again (once). */
  blockedAcrossRestart?: true
  /** The run.started of a run whose handle is not out yet: announced once it is. */
  unannounced?: { event: AgentEvent, run: Run }
  /** The open checkpoint while the run is blocked, as its event recorded it. */
  checkpoint?: OpenCheckpoint
  /** The handler's block and resume listeners. */
  watch?: RunWatch
}

/** What a handler's calls need from the executor. */
export interface HandlerHost {
  readonly log: Logger
  apply: (runId: string, command: RunCommand, actor: Actor) => Promise<Run>
  handoff: (runId: string, toAgent: string, context: Record<string, unknown>, actor: Actor) => Promise<Run>
  isActive: (runId: string) => boolean
  /** The conversation the run is a turn of (contexts.ts); `fresh`: its handler starts for the first time, just created. */
  conversation: (run: Run, fresh: boolean) => Promise<Conversation>
  saveContext: (run: Run, context: Record<string, unknown>) => Promise<void>
  /** Where `ctx.artifact` stores bytes; undefined: the node keeps no artifacts. */
  readonly artifacts: ArtifactWriter | undefined
  /** The node's run slots: a handler that outlived its run gives its node slot back when it returns. */
  readonly slots: RunSlots
}

const EXECUTOR: Actor = { role: 'executor' }

function str (v: unknown): string {
  return typeof v === 'string' ? v : ''
}

function isRecord (v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** Call each listener; one that throws is the agent's bug, logged, and never breaks the run. */
function tell<T> (log: Logger, runId: string, listeners: Iterable<(v: T) => void> | undefined, value: T, what: string): void {
  for (const l of [...(listeners ?? [])]) {
    try {
      l(value)
    } catch (err) {
      log.error({ err, run_id: runId }, `a handler's ${what} listener threw`)
    }
  }
}

/**
 * The executor committed a block of an active run: record the open
 * checkpoint, bind the handler's pending `ctx.block` if this is the block it
 * raised, and tell the handler's listeners.
 */
export function noteBlocked (log: Logger, a: Active, event: AgentEvent): void {
  const checkpoint: OpenCheckpoint = { checkpoint_id: str(event.payload.checkpoint_id), reason: str(event.payload.reason), by: str(event.payload.by) }
  a.checkpoint = checkpoint
  const w = a.waiter
  if (w !== undefined && !w.bound && w.checkpointId === checkpoint.checkpoint_id && checkpoint.by === a.run.agent_id) w.bound = true
  tell(log, a.run.run_id, a.watch?.blocked, checkpoint, 'onBlocked')
}

/**
 * The executor committed a resume of an active run: hand the resolution to
 * the handler's `ctx.block` if the block was its own, and tell its listeners.
 */
export function noteResumed (log: Logger, a: Active, event: AgentEvent): void {
  a.checkpoint = undefined
  const p = event.payload
  // the handler and the listeners get copies: a change they make is not a change of the signed event in memory
  const resolution = (): Record<string, unknown> => isRecord(p.resolution) ? structuredClone(p.resolution) : {}
  const resolved: ResolvedCheckpoint = {
    checkpoint_id: typeof p.checkpoint_id === 'string' ? p.checkpoint_id : null,
    resolution: resolution(),
    by: str(p.by)
  }
  const w = a.waiter
  if (w?.bound === true) {
    a.waiter = undefined
    w.resolve(resolution())
  }
  tell(log, a.run.run_id, a.watch?.resumed, resolved, 'onResumed')
}

/**
 * What a handler hands over (a progress payload, an output), as the event
 * will be signed: a copy of its canonical JSON. The event kept in memory (and
 * given to local listeners) shared the handler's object before, so a change
 * the handler made after the call changed it, and it no longer matched its
 * signature, its cached hash or the next event's `prev`.
 */
function detached (value: Record<string, unknown>): Record<string, unknown> {
  return JSON.parse(canonicalJson(value)) as Record<string, unknown>
}

/** Where a handler's run ends are written again while the store refuses them (end-retry.ts). */
function endingRetry (host: HandlerHost, runId: string, a: Active): EndingRetry {
  return { runId, active: () => host.isActive(runId) && !isTerminal(a.run.state), signal: a.abort.signal, log: host.log }
}

/** Fail a run on its executor's behalf; a run that ended meanwhile is left as it is (logged). */
async function failRun (host: HandlerHost, runId: string, a: Active, message: string): Promise<void> {
  try {
    await writeEnding(async () => host.apply(runId, { type: 'fail', code: 'HANDLER_FAILED', message }, EXECUTOR), endingRetry(host, runId, a))
  } catch (err) {
    host.log.warn({ err: toAapError(err), run_id: runId }, 'could not fail a run after its handler failed')
  }
}

/**
 * Run the capability's handler for a run, outside the caller's request. The
 * run counts as having a live handler from now on, so a block and resume
 * that come before the handler's first turn never start a second one.
 */
export function startHandler (
  host: HandlerHost, runId: string, a: Active, handler: RunHandler | undefined,
  input: Record<string, unknown>, handedOff: RunContext['handedOff'], restored: RunContext['restored']
): void {
  if (a.handlerRunning) {
    // one handler per run and process: a second start would run the work twice
    host.log.warn({ run_id: runId }, 'a run\'s handler is already running; not starting a second one')
    return
  }
  a.handlerRunning = true
  setImmediate(() => {
    // runHandler fails the run on every error it meets; what still escapes is said, never left unhandled
    runHandler(host, runId, a, handler, input, handedOff, restored).catch((err: unknown) => {
      host.log.error({ err: toAapError(err), run_id: runId }, 'a run\'s handler ended with an error nothing handled')
    })
  })
}

/**
 * `p`, or a rejection with the signal's reason once it aborts first. The
 * abort listener goes when `p` settles, so waits repeated over a long run do
 * not pile listeners up on its signal.
 */
async function unlessAborted<T> (p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) throw signal.reason
  let onAbort = (): void => {}
  const aborted = new Promise<never>((_resolve, reject) => {
    onAbort = () => { reject(signal.reason) }
    signal.addEventListener('abort', onAbort, { once: true })
  })
  try {
    return await Promise.race([p, aborted])
  } finally {
    signal.removeEventListener('abort', onAbort)
  }
}

/** Subscribe to one of the run's notifications. */
function subscribe<K extends keyof RunWatch> (a: Active, kind: K, listener: RunWatch[K] extends Set<infer L> ? L : never): () => void {
  a.watch ??= { blocked: new Set(), resumed: new Set() }
  const set = a.watch[kind] as Set<typeof listener>
  set.add(listener)
  return () => { set.delete(listener) }
}

/** The handler's context: its calls go through the executor's `apply`; calls made while blocked wait for the resume. */
function contextFor (
  host: HandlerHost, runId: string, a: Active, conversation: Conversation,
  input: Record<string, unknown>, handedOff: RunContext['handedOff'], restored: RunContext['restored']
): { ctx: RunContext, whenRunning: (command: RunCommand) => Promise<Run | undefined> } {
  const signal = a.abort.signal
  /** Wait while the run is blocked; returns once it runs or has ended; throws if the node stops meanwhile. */
  const untilRunning = async (): Promise<void> => {
    while (a.run.state === 'blocked') {
      if (signal.aborted) throw signal.reason
      // the executor resolves it at the resume, or when the run ends
      a.resumed ??= Promise.withResolvers()
      await unlessAborted(a.resumed.promise, signal)
    }
  }
  const refusedByBlock = (err: unknown): boolean => err instanceof AapError && err.code === 'INVALID_TRANSITION' && a.run.state === 'blocked'
  /**
   * Apply a command the executor may only make while the run runs. A block
   * that another agent commits between the wait and the command refuses it;
   * then it waits again (each turn needs a new block, so this never spins).
   * Undefined when the run ended while waiting (the apply was not tried).
   */
  const whenRunning = async (command: RunCommand): Promise<Run | undefined> => {
    for (;;) {
      await untilRunning()
      if (!host.isActive(runId)) return undefined
      try {
        return await host.apply(runId, command, EXECUTOR)
      } catch (err) {
        if (!refusedByBlock(err)) throw err
      }
    }
  }
  const ctx: RunContext = {
    run: a.run,
    input,
    signal,
    handedOff,
    restored,
    get blocked () {
      if (a.run.state !== 'blocked') return null
      return a.checkpoint ?? { checkpoint_id: a.run.checkpoint_id ?? '', reason: a.run.block_reason ?? '', by: '' }
    },
    onBlocked: (listener) => subscribe(a, 'blocked', listener),
    onResumed: (listener) => subscribe(a, 'resumed', listener),
    untilResumed: async () => {
      if (a.run.state !== 'blocked') return null
      let off = (): void => {}
      try {
        return await unlessAborted(new Promise<ResolvedCheckpoint>(resolve => { off = subscribe(a, 'resumed', resolve) }), signal)
      } finally {
        off()
      }
    },
    progress: async (payload) => {
      assertPayloadValueDepth(payload, 'progress payload')
      checkParts(payload, 'progress')
      if (await whenRunning({ type: 'progress', payload: detached(payload) }) === undefined) throw endedError(a, 'progress')
    },
    block: async (text, checkpointId) => {
      // what the API checks of a block request holds for a handler's too (a handler may pass on what a remote
      // agent said: an A2A agent's question): a run the schema refuses could be read by nobody; the reason is cut
      const reason = cutText(String(text), REASON_MAX_CHARS)
      isBlock.assert({ run_id: runId, reason, checkpoint_id: checkpointId }, 'block')
      for (;;) {
        await untilRunning()
        const { promise, resolve } = Promise.withResolvers<Record<string, unknown>>()
        a.waiter = { checkpointId, bound: false, resolve }
        try {
          await host.apply(runId, { type: 'block', reason, checkpoint_id: checkpointId }, EXECUTOR)
        } catch (err) {
          a.waiter = undefined
          if (refusedByBlock(err)) continue
          throw err
        }
        return await unlessAborted(promise, signal)
      }
    },
    complete: async (output) => {
      checkOutput(output)
      if (await whenRunning({ type: 'complete', output: detached(output) }) === undefined) throw endedError(a, 'complete')
    },
    fail: async (message) => {
      // cut as the run's other failures are: a longer message would make the run one the schema refuses, so
      // nobody could read it over the wire (its delegator's liveness probes among them)
      await host.apply(runId, { type: 'fail', code: 'HANDLER_FAILED', message: cutText(String(message), FAILURE_MESSAGE_MAX_CHARS) }, EXECUTOR)
    },
    // like every step of the executor's, it waits while the run is blocked: handed on, the work would go on
    // elsewhere past a checkpoint nobody resolved
    handoff: async (toAgent, context) => {
      for (;;) {
        await untilRunning()
        if (!host.isActive(runId)) throw endedError(a, 'handoff')
        try {
          return await host.handoff(runId, toAgent, context, EXECUTOR)
        } catch (err) {
          if (!refusedByBlock(err)) throw err
        }
      }
    },
    conversation,
    saveContext: async (context) => {
      await host.saveContext(a.run, context)
      conversation.saved = context
    },
    artifact: async (source, opts) => {
      if (host.artifacts === undefined) throw new AapError('INTERNAL', 'this node keeps no artifacts')
      // within the run outputs' share of the store: anyone allowed to call the capability starts runs
      return host.artifacts.put(source, { ...opts, pin: 'run-output' })
    }
  }
  return { ctx, whenRunning }
}

/**
 * A run's output is what its Run record will carry: one the Run schema
 * refuses (more than 256 members, not an object), or one nested past
 * PAYLOAD_MAX_DEPTH (the frames that carry the run stay within the wire's
 * bound), would make the run unreadable over the wire, and its delegator,
 * whose get_run answers it could no longer read, would wait on it for ever.
 * So it is refused here, and the run fails. A caller that keeps an output
 * for a later completion (the API, for a run someone else holds blocked)
 * checks it first, so that a refusal reaches the caller that sent it.
 */
export function checkOutput (output: unknown): void {
  isRunOutput.assert(output, 'output')
  assertPayloadValueDepth(output, 'output')
  checkParts(output as Record<string, unknown>, 'output')
}

/** The refusal for a call whose run ended while the call waited for a resume. */
function endedError (a: Active, what: string): AapError {
  return new AapError('INVALID_TRANSITION', `cannot ${what} run ${a.run.run_id}: it ended (${a.run.state}) while it was blocked`, {
    run_id: a.run.run_id, state: a.run.state, command: what
  })
}

/** The handler's function returned (or threw): if its run ended first, the node slot it held is free again (said). */
function handlerReturned (host: HandlerHost, runId: string, a: Active): void {
  a.inHandler = undefined
  if (host.slots.handlerReturned(runId)) host.log.info({ run_id: runId, state: a.run.state }, 'a handler returned after its run ended; its node slot is free again')
}

async function runHandler (
  host: HandlerHost, runId: string, a: Active, handler: RunHandler | undefined,
  input: Record<string, unknown>, handedOff: RunContext['handedOff'], restored: RunContext['restored']
): Promise<void> {
  try {
    if (handler === undefined) {
      await failRun(host, runId, a, 'no handler is registered for this capability')
      return
    }
    // the conversation's earlier turns and saved context are read before the handler starts (turns.md); a read that
    // fails (the store) fails the run: no handler would ever start, and the run would stay running for good
    let conversation: Conversation
    try {
      conversation = await host.conversation(a.run, restored === null)
    } catch (err) {
      host.log.error({ err: toAapError(err), run_id: runId }, 'the conversation of a run could not be read; the run fails')
      if (host.isActive(runId) && !isTerminal(a.run.state)) {
        await failRun(host, runId, a, cutText(`its conversation could not be read: ${toAapError(err).message}`, FAILURE_MESSAGE_MAX_CHARS))
      }
      return
    }
    const { ctx, whenRunning } = contextFor(host, runId, a, conversation, input, handedOff, restored)
    let output: Record<string, unknown> | undefined | void
    try {
      // live from here to its return: a run that ends meanwhile holds its node slot until then (slots.ts)
      a.inHandler = true
      try {
        output = await handler(ctx)
      } finally {
        handlerReturned(host, runId, a)
      }
    } catch (err) {
      if (host.isActive(runId) && !isTerminal(a.run.state) && !a.abort.signal.aborted) {
        await failRun(host, runId, a, cutText(toAapError(err).message, FAILURE_MESSAGE_MAX_CHARS))
      } else {
        // the run ended by other means (cancel, handoff, stop): the handler's error is its reaction to that
        host.log.debug({ err: toAapError(err), run_id: runId }, 'a handler ended with an error after its run ended')
      }
      return
    }
    if (!host.isActive(runId) || isTerminal(a.run.state)) return // it completed, failed or handed off through its ctx
    // returned while blocked: the output is kept, and the run completes with it once resumed
    if (a.run.state === 'blocked') host.log.debug({ run_id: runId, checkpoint_id: a.run.checkpoint_id }, 'a handler returned while its run is blocked; its output waits for the resume')
    try {
      checkOutput(output ?? {})
      const kept = detached(output ?? {})
      const done = await writeEnding(async () => whenRunning({ type: 'complete', output: kept }), endingRetry(host, runId, a))
      if (done === undefined) host.log.info({ run_id: runId, state: a.run.state }, 'a handler\'s output was dropped: its run ended while blocked')
    } catch (err) {
      if (host.isActive(runId) && !isTerminal(a.run.state) && !a.abort.signal.aborted) {
        await failRun(host, runId, a, cutText(`the handler's output could not complete the run: ${toAapError(err).message}`, FAILURE_MESSAGE_MAX_CHARS))
      } else {
        // the run ended (cancel, stop) while the output waited: it is not the handler's failure
        host.log.info({ err: toAapError(err), run_id: runId, state: a.run.state }, 'a handler\'s output could not complete its run')
      }
    }
  } finally {
    a.handlerRunning = false
  }
}
