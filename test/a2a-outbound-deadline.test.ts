/**
 * The bound on a forwarded A2A task (A2A_TASK_MAX_MS) counts the task's own
 * time, not the time its run is blocked on an input request: a unit-level
 * check of the deadline logic of A2aOutbound.forward, with vitest's fake
 * timers and a stand-in for the SDK client whose first stream asks for input.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { TaskState } from '@a2a-js/sdk'
import type { SendMessageRequest, StreamResponse } from '@a2a-js/sdk'
import type { Client } from '@a2a-js/sdk/client'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import type { RunContext } from '../src/runs/runtime.ts'
import { A2aOutbound, type BridgedAgent } from '../src/a2a/outbound.ts'
import { A2A_TASK_MAX_MS } from '../src/a2a/constants.ts'

const CAP = { capability_id: 'a2a:approve', version: '1.0.0' }
const MINUTE_MS = 60_000

function status (taskId: string, state: TaskState): StreamResponse {
  return { payload: { $case: 'statusUpdate', value: { taskId, contextId: 'corr-deadline', status: { state, message: undefined, timestamp: new Date().toISOString() }, metadata: undefined } } }
}

/** A stand-in SDK client: each SendStreamingMessage runs the next leg given; CancelTask is counted. */
function fakeClient (legs: Array<(signal: AbortSignal) => AsyncGenerator<StreamResponse>>): { client: Client, sent: SendMessageRequest[], canceled: string[] } {
  const sent: SendMessageRequest[] = []
  const canceled: string[] = []
  const client = {
    sendMessageStream (req: SendMessageRequest, opts: { signal: AbortSignal }): AsyncGenerator<StreamResponse> {
      sent.push(req)
      const leg = legs[sent.length - 1]
      if (leg === undefined) throw new Error(`no leg ${sent.length}`)
      return leg(opts.signal)
    },
    async cancelTask (params: { id: string }): Promise<unknown> {
      canceled.push(params.id)
      return {}
    },
    async getTask (): Promise<never> {
      throw new Error('the stand-in client has no GetTask')
    }
  }
  return { client: client as unknown as Client, sent, canceled }
}

/** A leg that fails like the SDK client's fetch once its signal is aborted, else waits for `go`, then yields `events`. */
function leg (events: StreamResponse[], go?: Promise<void>, started?: PromiseWithResolvers<void>): (signal: AbortSignal) => AsyncGenerator<StreamResponse> {
  return async function * (signal: AbortSignal) {
    signal.throwIfAborted()
    started?.resolve()
    if (go !== undefined) {
      await new Promise<void>((resolve, reject) => {
        signal.addEventListener('abort', () => { reject(signal.reason) }, { once: true })
        go.then(resolve, reject)
      })
    }
    yield * events
  }
}

interface Harness { ctx: RunContext, blocked: PromiseWithResolvers<void>, answer: PromiseWithResolvers<Record<string, unknown>> }

function runContext (): Harness {
  const blocked = Promise.withResolvers<void>()
  const answer = Promise.withResolvers<Record<string, unknown>>()
  const ctx = {
    run: { run_id: 'run-deadline', correlation_id: 'corr-deadline' },
    input: { order: 1 },
    signal: new AbortController().signal,
    restored: null,
    handedOff: null,
    progress: async () => {},
    block: async () => {
      blocked.resolve()
      return await answer.promise
    }
  }
  return { ctx: ctx as unknown as RunContext, blocked, answer }
}

function forward (outbound: A2aOutbound, client: Client, ctx: RunContext): Promise<Record<string, unknown>> {
  const agent: BridgedAgent = { url: 'http://a2a.invalid/', card: {} as BridgedAgent['card'], draft: { name: 'x', capabilities: [CAP] }, skills: new Map() }
  const fwd = (outbound as unknown as { forward: (a: BridgedAgent, c: Client, s: boolean, cap: typeof CAP, ctx: RunContext) => Promise<Record<string, unknown>> }).forward
  return fwd.call(outbound, agent, client, true, CAP, ctx)
}

describe('A2A outbound: the task bound leaves out the time its run is blocked', () => {
  beforeEach(() => { vi.useFakeTimers() })
  afterEach(() => { vi.useRealTimers() })

  it('an input request answered after more than A2A_TASK_MAX_MS still resumes the task', async () => {
    const { client, sent, canceled } = fakeClient([
      leg([status('task-1', TaskState.TASK_STATE_INPUT_REQUIRED)]),
      leg([status('task-1', TaskState.TASK_STATE_COMPLETED)])
    ])
    const h = runContext()
    const outbound = new A2aOutbound({} as MeshNode, silentLogger())
    const result = forward(outbound, client, h.ctx)
    await h.blocked.promise
    // the human answers a day later
    await vi.advanceTimersByTimeAsync(A2A_TASK_MAX_MS + 24 * 60 * MINUTE_MS)
    h.answer.resolve({ approved: true })
    await expect(result).resolves.toEqual({ artifacts: [] })
    expect(sent).toHaveLength(2)
    expect(sent[1]?.message?.taskId).toBe('task-1')
    expect(canceled).toEqual([])
  })

  it('the legs before and after a block share the bound', async () => {
    const firstGo = Promise.withResolvers<void>()
    const secondStarted = Promise.withResolvers<void>()
    const { client, canceled } = fakeClient([
      leg([status('task-2', TaskState.TASK_STATE_INPUT_REQUIRED)], firstGo.promise),
      leg([status('task-2', TaskState.TASK_STATE_COMPLETED)], new Promise<void>(() => {}), secondStarted)
    ])
    const h = runContext()
    // this server's stream is silent for most of the task's time on purpose: only the task's bound applies here
    const outbound = new A2aOutbound({} as MeshNode, silentLogger(), { firstEventMs: A2A_TASK_MAX_MS })
    const result = forward(outbound, client, h.ctx)
    let settled = false
    result.then(() => { settled = true }, () => { settled = true })
    // the first leg takes 40 minutes of the bound
    const firstLegMs = 40 * MINUTE_MS
    await vi.advanceTimersByTimeAsync(firstLegMs)
    firstGo.resolve()
    await h.blocked.promise
    await vi.advanceTimersByTimeAsync(A2A_TASK_MAX_MS)
    h.answer.resolve({ approved: true })
    await secondStarted.promise
    // the second leg has what is left, not a whole bound again
    await vi.advanceTimersByTimeAsync(A2A_TASK_MAX_MS - firstLegMs - MINUTE_MS)
    expect(settled).toBe(false)
    await vi.advanceTimersByTimeAsync(2 * MINUTE_MS)
    await expect(result).rejects.toThrow(/no answer within/)
    expect(canceled).toEqual(['task-2'])
  })
})
