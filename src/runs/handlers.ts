/**
 * Running an agent's in-process handler for a run this node executes: the
 * RunContext it sees, and what its return or throw does to the run. The
 * run's state changes only through the executor's `apply`.
 */
import type { Logger } from '../logger.ts'
import { toAapError } from '../errors.ts'
import { isTerminal, type AgentEvent, type Run } from '../runlog/types.ts'
import type { Actor, RunCommand, RunContext, RunHandler } from './types.ts'

/** A run this node executes that has not ended: the executor's working state of it. */
export interface Active {
  run: Run
  last?: AgentEvent
  abort: AbortController
  /** Resolves the handler's pending `ctx.block` with the resolution. */
  waiter?: (resolution: Record<string, unknown>) => void
  /** Resolves when a blocked run is resumed or ends (handler calls made while blocked wait for it). */
  resumed?: PromiseWithResolvers<void>
  handlerRunning: boolean
  /** The run.started of a run whose handle is not out yet: announced once it is. */
  unannounced?: { event: AgentEvent, run: Run }
}

/** What a handler's calls need from the executor. */
export interface HandlerHost {
  readonly log: Logger
  apply: (runId: string, command: RunCommand, actor: Actor) => Promise<Run>
  handoff: (runId: string, toAgent: string, context: Record<string, unknown>, actor: Actor) => Promise<Run>
  isActive: (runId: string) => boolean
}

const EXECUTOR: Actor = { role: 'executor' }

/** Fail a run on its executor's behalf; a run that ended meanwhile is left as it is (logged). */
async function failRun (host: HandlerHost, runId: string, message: string): Promise<void> {
  try {
    await host.apply(runId, { type: 'fail', code: 'HANDLER_FAILED', message }, EXECUTOR)
  } catch (err) {
    host.log.warn({ err: toAapError(err), run_id: runId }, 'could not fail a run after its handler failed')
  }
}

/** Run the capability's handler for a run, outside the caller's request. */
export function startHandler (
  host: HandlerHost, runId: string, a: Active, handler: RunHandler | undefined,
  input: Record<string, unknown>, handedOff: RunContext['handedOff'], restored: RunContext['restored']
): void {
  setImmediate(() => { void runHandler(host, runId, a, handler, input, handedOff, restored) })
}

async function runHandler (
  host: HandlerHost, runId: string, a: Active, handler: RunHandler | undefined,
  input: Record<string, unknown>, handedOff: RunContext['handedOff'], restored: RunContext['restored']
): Promise<void> {
  if (handler === undefined) {
    await failRun(host, runId, 'no handler is registered for this capability')
    return
  }
  const untilRunning = async (): Promise<void> => {
    while (a.run.state === 'blocked' && a.resumed !== undefined) await a.resumed.promise
  }
  const ctx: RunContext = {
    run: a.run,
    input,
    signal: a.abort.signal,
    handedOff,
    restored,
    progress: async (payload) => {
      await untilRunning()
      await host.apply(runId, { type: 'progress', payload }, EXECUTOR)
    },
    block: async (reason, checkpointId) => {
      const { promise, resolve } = Promise.withResolvers<Record<string, unknown>>()
      a.waiter = resolve
      try {
        await host.apply(runId, { type: 'block', reason, checkpoint_id: checkpointId }, EXECUTOR)
      } catch (err) {
        a.waiter = undefined
        throw err
      }
      const aborted = new Promise<never>((_resolve, reject) => {
        if (a.abort.signal.aborted) reject(a.abort.signal.reason)
        a.abort.signal.addEventListener('abort', () => { reject(a.abort.signal.reason) }, { once: true })
      })
      return Promise.race([promise, aborted])
    },
    complete: async (output) => {
      await untilRunning()
      await host.apply(runId, { type: 'complete', output }, EXECUTOR)
    },
    fail: async (message) => {
      await host.apply(runId, { type: 'fail', code: 'HANDLER_FAILED', message }, EXECUTOR)
    },
    handoff: async (toAgent, context) => host.handoff(runId, toAgent, context, EXECUTOR)
  }
  a.handlerRunning = true
  try {
    const output = await handler(ctx)
    if (host.isActive(runId) && a.run.state === 'running') {
      await host.apply(runId, { type: 'complete', output: output ?? {} }, EXECUTOR)
    }
  } catch (err) {
    if (host.isActive(runId) && !isTerminal(a.run.state) && !a.abort.signal.aborted) {
      await failRun(host, runId, toAapError(err).message.slice(0, 1000))
    } else {
      // the run ended by other means (cancel, handoff, stop): the handler's error is its reaction to that
      host.log.debug({ err: toAapError(err), run_id: runId }, 'a handler ended with an error after its run ended')
    }
  } finally {
    a.handlerRunning = false
  }
}
