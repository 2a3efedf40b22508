/**
 * The scripted conformance agent: serves CONFORMANCE_CAPABILITY and does
 * what each run's input says, so a conformance kit can drive every AAP
 * behaviour of a node over the wire. Its input language is specified in
 * protocols/conformance.md; another implementation provides the same agent.
 *
 * `input.op`:
 *  - `complete`: emit `progress` (0..AGENT_MAX_PROGRESS_EVENTS) run.progress events, complete with `{done, echo}`
 *  - `fail`: fail with `message`
 *  - `hold`: stay running until the run ends otherwise (cancel, handoff) or AGENT_HOLD_MAX_MS
 *  - `block`: block on `checkpoint` (with `reason`), complete with `{checkpoint, resolution}`
 *  - `self-resume`: block on `checkpoint`, then try to resume the run as its own executor; remember the outcome
 *  - `report`: complete with the outcome of the self-resume attempt of run `of`
 *  - `handoff`: hand the run off to agent `to` with `context`
 *  - `subdelegate`: delegate a `complete` run of the same task to agent `to`, with this run as parent
 *  - `refuse`: the delegation is refused (DELEGATION_REFUSED)
 *  - `stall-accept`: the delegation is accepted only once the caller's request is gone (its stream or its time)
 * A run that continues another after a handoff completes with `{continued, from}`.
 */
import { AapError } from '../errors.ts'
import type { MeshNode } from '../node.ts'
import type { DelegationPolicy, RunContext, RunHandler } from '../runs/runtime.ts'
import type { Logger } from '../logger.ts'
import {
  AGENT_HOLD_MAX_MS, AGENT_MAX_PROGRESS_EVENTS, AGENT_MAX_REMEMBERED_ATTEMPTS, AGENT_REPORT_WAIT_MS,
  AGENT_SELF_RESUME_WAIT_MS, AGENT_STALL_MAX_MS, CONFORMANCE_CAPABILITY
} from './constants.ts'

export interface SelfResumeAttempt {
  accepted: boolean
  code: string | null
  message: string
}

function str (v: unknown, fallback: string): string {
  return typeof v === 'string' && v.length > 0 ? v : fallback
}

function obj (v: unknown): Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? v as Record<string, unknown> : {}
}

/** Resolves after `ms`, or earlier when `signal` aborts. */
async function waitOrAbort (ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return
  await new Promise<void>(resolve => {
    const done = (): void => { clearTimeout(timer); signal.removeEventListener('abort', done); resolve() }
    const timer = setTimeout(done, ms)
    signal.addEventListener('abort', done, { once: true })
  })
}

export class ConformanceAgent {
  private readonly node: MeshNode
  private readonly log: Logger | undefined
  private readonly attempts = new Map<string, SelfResumeAttempt>()
  private readonly waiting = new Map<string, Set<(a: SelfResumeAttempt) => void>>()

  constructor (node: MeshNode, log?: Logger) {
    this.node = node
    this.log = log
  }

  /** Serve the capability and install the delegation policy (`refuse`, `stall-accept`). */
  install (): void {
    this.node.runs.handle(CONFORMANCE_CAPABILITY, this.handler)
    this.node.runs.setPolicy(this.policy)
  }

  readonly policy: DelegationPolicy = async (req) => {
    if (req.capability.capability_id !== CONFORMANCE_CAPABILITY.capability_id) return undefined
    if (req.input.op === 'refuse') return 'the conformance agent refuses this delegation, as its input asked'
    if (req.input.op === 'stall-accept') {
      // accept only once the caller can no longer receive the handle
      await waitOrAbort(AGENT_STALL_MAX_MS, req.signal)
    }
    return undefined
  }

  readonly handler: RunHandler = async (ctx) => {
    if (ctx.handedOff !== null) return { continued: true, from: ctx.handedOff.from.run_id }
    const input = ctx.input
    switch (input.op) {
      case 'complete': {
        const n = Math.min(Math.max(0, Math.floor(Number(input.progress ?? 0)) || 0), AGENT_MAX_PROGRESS_EVENTS)
        for (let i = 1; i <= n; i++) await ctx.progress({ step: i, of: n })
        return { done: true, echo: input.echo ?? null }
      }
      case 'fail':
        throw new Error(str(input.message, 'the conformance agent fails this run, as its input asked'))
      case 'hold':
        await waitOrAbort(AGENT_HOLD_MAX_MS, ctx.signal)
        return { held: true }
      case 'block': {
        const checkpoint = str(input.checkpoint, 'cp-conformance')
        const resolution = await ctx.block(str(input.reason, 'conformance checkpoint'), checkpoint)
        return { checkpoint, resolution }
      }
      case 'self-resume':
        return this.selfResume(ctx)
      case 'report':
        return { self_resume: await this.attemptOf(str(input.of, ''), ctx.signal) }
      case 'handoff':
        await ctx.handoff(str(input.to, ''), obj(input.context))
        return undefined
      case 'subdelegate': {
        const child = await this.node.runs.delegate({
          to_agent: str(input.to, ''),
          task_id: ctx.run.correlation_id,
          capability: CONFORMANCE_CAPABILITY,
          input: { op: 'complete' },
          parent_run: ctx.run.run_id
        })
        return { child: child.run_id }
      }
      case 'stall-accept':
        return { accepted_late: true }
      default:
        throw new Error(`unknown conformance op ${JSON.stringify(input.op ?? null).slice(0, 64)}`)
    }
  }

  /** Block, then try to resume the run as its executor: the node must refuse (INVALID_TRANSITION). */
  private async selfResume (ctx: RunContext): Promise<Record<string, unknown>> {
    const runId = ctx.run.run_id
    const committed = Promise.withResolvers<void>()
    const off = this.node.runs.onEvent((e) => { if (e.run_id === runId && e.type === 'run.blocked') committed.resolve() })
    const timer = setTimeout(() => { committed.reject(new Error(`run.blocked of ${runId} not seen within ${AGENT_SELF_RESUME_WAIT_MS} ms`)) }, AGENT_SELF_RESUME_WAIT_MS)
    const blocking = ctx.block('conformance: the run will try to resume itself', str(ctx.input.checkpoint, 'cp-self-resume'))
    // a block that fails (the run was canceled first) ends the wait at once; its error is the run's, below
    blocking.catch((err: unknown) => { committed.reject(err) })
    let attempt: SelfResumeAttempt
    try {
      await committed.promise
      await this.node.runs.resume(runId, { resumed_by: 'the run itself' })
      attempt = { accepted: true, code: null, message: 'the node let the blocked run resume itself' }
    } catch (err) {
      const e = err as Error
      attempt = { accepted: false, code: err instanceof AapError ? err.code : null, message: e.message.slice(0, 512) }
    } finally {
      clearTimeout(timer)
      off()
    }
    this.remember(runId, attempt)
    const resolution = await blocking
    return { self_resume: attempt, resolution }
  }

  private remember (runId: string, attempt: SelfResumeAttempt): void {
    this.attempts.set(runId, attempt)
    while (this.attempts.size > AGENT_MAX_REMEMBERED_ATTEMPTS) {
      const oldest = this.attempts.keys().next().value
      if (oldest === undefined) break
      this.attempts.delete(oldest)
    }
    for (const w of this.waiting.get(runId) ?? []) w(attempt)
    this.waiting.delete(runId)
    this.log?.debug({ run_id: runId, attempt }, 'conformance agent: self-resume attempt')
  }

  private async attemptOf (runId: string, signal: AbortSignal): Promise<SelfResumeAttempt> {
    const known = this.attempts.get(runId)
    if (known !== undefined) return known
    if (this.waiting.size >= AGENT_MAX_REMEMBERED_ATTEMPTS) throw new Error('too many reports waiting')
    return new Promise((resolve, reject) => {
      const set = this.waiting.get(runId) ?? new Set()
      this.waiting.set(runId, set)
      const finish = (a: SelfResumeAttempt | Error): void => {
        clearTimeout(timer)
        signal.removeEventListener('abort', onAbort)
        set.delete(finish)
        if (set.size === 0) this.waiting.delete(runId)
        if (a instanceof Error) reject(a)
        else resolve(a)
      }
      const onAbort = (): void => { finish(new Error('report run ended')) }
      const timer = setTimeout(() => { finish(new Error(`no self-resume attempt of ${runId.slice(0, 128)} within ${AGENT_REPORT_WAIT_MS} ms`)) }, AGENT_REPORT_WAIT_MS)
      signal.addEventListener('abort', onAbort, { once: true })
      set.add(finish)
    })
  }
}

/** Install the conformance agent on a started node (its card must declare CONFORMANCE_CAPABILITY). */
export function installConformanceAgent (node: MeshNode, log?: Logger): ConformanceAgent {
  const agent = new ConformanceAgent(node, log)
  agent.install()
  return agent
}
