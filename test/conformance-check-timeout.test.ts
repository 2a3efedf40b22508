/**
 * A check that runs past KIT_CHECK_TIMEOUT_MS is reported failed, and now it also stops: before, it went on
 * sending requests to the target beside the checks that followed (and after the kit had reported it), changing
 * what they read and holding the target's slots. KIT_CHECK_TIMEOUT_MS is cut to 2 s here; the target holds the
 * unknown-run check's first request until the check is reported, and answers the rest at once.
 */
import { afterAll, describe, expect, it, vi } from 'vitest'
import { CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL } from '../src/constants.ts'
import { RunNotFoundError } from '../src/errors.ts'
import { schema } from '../src/schema/validate.ts'
import { method, serve, type CallContext } from '../src/wire/rpc.ts'
import type { Run } from '../src/runlog/types.ts'
import type { RunCommand, Actor } from '../src/runs/types.ts'
import { nestedCallLimit } from '../src/runs/protocols.ts'
import { runConformance } from '../src/conformance/runner.ts'
import { startTarget, type Target } from './fixtures/broken-targets.ts'

vi.mock('../src/conformance/constants.ts', async (importOriginal) => ({
  ...(await importOriginal<typeof import('../src/conformance/constants.ts')>()),
  KIT_CHECK_TIMEOUT_MS: 2_000
}))

interface RunsInside {
  applyRemote: (runId: string, ctx: CallContext, command: RunCommand) => Promise<Run>
  localRun: (runId: string) => Promise<Run>
  actorOf: (run: Run, peer: string) => Actor
  handoff: (runId: string, toAgent: string, context: Record<string, unknown>, actor: Actor, opts: Record<string, unknown>) => Promise<Run>
}
const isBlock = schema<{ run_id: string, reason: string, checkpoint_id: string }>('aap:runs#/definitions/BlockRequest')
const isResume = schema<{ run_id: string, resolution: Record<string, unknown> }>('aap:runs#/definitions/ResumeRequest')
const isGetRun = schema<{ run_id: string }>('aap:runs#/definitions/GetRunRequest')
const isCancel = schema<{ run_id: string, reason?: string }>('aap:runs#/definitions/CancelRequest')
const isControlHandoff = schema<{ run_id: string, to_agent: string, context: Record<string, unknown> }>('aap:runs#/definitions/ControlHandoffRequest')

const UNKNOWN = '0'.repeat(24)

describe('a conformance check past its time limit', () => {
  let t: Target | undefined
  afterAll(async () => { await t?.node.stop() })

  it('stops sending to the target once it is reported', async () => {
    t = await startTarget()
    const r = (t.node.runs as unknown as { executor: RunsInside }).executor
    let asked = 0
    const reported = Promise.withResolvers<void>()
    // the node's own control logic, except that a request about the unknown run waits until the check was reported
    const slow = async (runId: string): Promise<void> => {
      if (!runId.endsWith(UNKNOWN)) return
      asked++
      await reported.promise
      throw new RunNotFoundError(`no run ${runId}`, { run_id: runId })
    }
    await t.node.host.unhandle(CONTROL_PROTOCOL)
    await serve(t.node.host, {
      protocol: CONTROL_PROTOCOL,
      maxFrameBytes: CONTROL_MAX_FRAME_BYTES,
      methods: {
        block: method(isBlock, async (req, ctx) => { await slow(req.run_id); return { run: await r.applyRemote(req.run_id, ctx, { type: 'block', reason: req.reason, checkpoint_id: req.checkpoint_id }) } }),
        resume: method(isResume, async (req, ctx) => { await slow(req.run_id); return { run: await r.applyRemote(req.run_id, ctx, { type: 'resume', resolution: req.resolution }) } }),
        cancel: method(isCancel, async (req, ctx) => { await slow(req.run_id); return { run: await r.applyRemote(req.run_id, ctx, { type: 'cancel', reason: req.reason ?? 'canceled by delegator' }) } }),
        get_run: method(isGetRun, async (req) => { await slow(req.run_id); return { run: await r.localRun(req.run_id) } }),
        handoff: method(isControlHandoff, async (req, ctx) => {
          const run = await r.localRun(req.run_id)
          return { run: await r.handoff(run.run_id, req.to_agent, req.context, r.actorOf(run, ctx.peer.toString()), { signal: ctx.signal, callTimeoutMs: nestedCallLimit() }) }
        })
      }
    })
    let askedWhenReported = -1
    const report = await runConformance({
      target: t.address,
      onCheck: (c) => {
        if (c.id !== 'unknown-run') return
        askedWhenReported = asked
        reported.resolve()
      }
    })
    const check = report.checks.find(c => c.id === 'unknown-run')
    expect(check?.status).toBe('fail')
    expect(check?.message).toMatch(/did not finish within 2000 ms/)
    expect(askedWhenReported).toBe(1)
    // the held request was answered once the check was reported: the check asked nothing more
    expect(asked).toBe(1)
  }, 300_000)
})
