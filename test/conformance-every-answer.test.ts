/**
 * The kit judges every Run the target answered, not only the last it read of
 * each run, and what it shows as evidence is what the target said to the
 * checks, not to the kit's own cleanup. Real nodes running the conformance
 * agent, each served one way:
 *
 *  - correct: aap-mesh as it is; every clause passes, and no cleanup cancel
 *    (nor the discover check's reach probe) is the error frame of a passed
 *    check;
 *  - answers-wrong-correlation: block, resume and cancel answer a Run whose
 *    correlation_id is not the task's (get_run stays right);
 *  - block-shows-endpoint: a block answers a Run whose block_reason names the
 *    target's own multiaddr (get_run stays right);
 *  - no-late-run: a stall-accept delegation, once its caller is gone, is
 *    refused instead of run: handle-undelivered has no run to judge, and says
 *    so as UNDECIDED, not as a failure.
 */
import { describe, expect, it } from 'vitest'
import { CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL } from '../src/constants.ts'
import type { Run } from '../src/runlog/types.ts'
import { isBlock, isCancel, isControlHandoff, isGetRun, isResume } from '../src/runs/messages.ts'
import { nestedCallLimit } from '../src/runs/protocols.ts'
import type { DelegationPolicy } from '../src/runs/types.ts'
import { method, serve, type CallContext } from '../src/wire/rpc.ts'
import { KIT_RUN_ANSWERS_MAX } from '../src/conformance/constants.ts'
import { CheckFailure, Kit, type KitNodes } from '../src/conformance/kit.ts'
import { runOfTicket } from '../src/runs/admission.ts'
import { newRunId } from '../src/runlog/event.ts'
import type { RunTicket } from '../src/runlog/ticket.ts'
import type { Frame } from '../src/wire/raw.ts'
import { describeKitRuns, expectExactFailures, type ExpectedFailures, type Target } from './fixtures/broken-targets.ts'

type Case = 'correct' | 'answers-wrong-correlation' | 'block-shows-endpoint' | 'no-late-run'

/** The parts of the run service a re-served control protocol reuses (private in the product). */
interface Inside {
  applyRemote: (runId: string, ctx: CallContext, command: Record<string, unknown>) => Promise<Run>
  localRun: (runId: string) => Promise<Run>
  actorOf: (run: Run, peer: string) => unknown
  handoff: (runId: string, toAgent: string, context: Record<string, unknown>, actor: unknown, opts: Record<string, unknown>) => Promise<Run>
  policy: DelegationPolicy | undefined
}

const EXPECTED: Record<Exclude<Case, 'correct' | 'no-late-run'>, ExpectedFailures> = {
  'answers-wrong-correlation': {
    clauses: ['AAP-CONF-CORRELATION'],
    checks: ['runs-correlation'],
    message: { 'runs-correlation': /runs with another correlation in \d+ answer\(s\): .*(block|resume|cancel)/ }
  },
  'block-shows-endpoint': {
    clauses: ['AAP-CARD-ENDPOINT-HIDDEN'],
    checks: ['no-endpoint-upward'],
    message: { 'no-endpoint-upward': /endpoint data in \d+ place\(s\): run \S+ \([^)]*block[^)]*\)/ }
  }
}

/** Checks that send a cancel expecting an error frame: a cancel frame is their evidence. */
const CANCEL_PROBES = new Set(['invalid-transitions', 'unauthorized-control', 'stranger-control', 'handoff-history', 'unknown-run'])

/** Serve the control protocol again with the node's own logic, each block, resume and cancel answer passed through `alter`. */
async function reserveControl (t: Target, x: Inside, alter: (type: 'block' | 'resume' | 'cancel', run: Run) => Run): Promise<void> {
  await t.node.host.unhandle(CONTROL_PROTOCOL)
  await serve(t.node.host, {
    protocol: CONTROL_PROTOCOL,
    maxFrameBytes: CONTROL_MAX_FRAME_BYTES,
    methods: {
      block: method(isBlock, async (req, ctx) => ({ run: alter('block', await x.applyRemote(req.run_id, ctx, { type: 'block', reason: req.reason, checkpoint_id: req.checkpoint_id })) })),
      resume: method(isResume, async (req, ctx) => ({ run: alter('resume', await x.applyRemote(req.run_id, ctx, { type: 'resume', resolution: req.resolution })) })),
      cancel: method(isCancel, async (req, ctx) => ({ run: alter('cancel', await x.applyRemote(req.run_id, ctx, { type: 'cancel', reason: req.reason ?? 'canceled by delegator' })) })),
      get_run: method(isGetRun, async (req) => ({ run: await x.localRun(req.run_id) })),
      handoff: method(isControlHandoff, async (req, ctx) => {
        const run = await x.localRun(req.run_id)
        return { run: await x.handoff(run.run_id, req.to_agent, req.context, x.actorOf(run, ctx.peer.toString()), { signal: ctx.signal, callTimeoutMs: nestedCallLimit() }) }
      })
    }
  })
}

async function prepare (t: Target, c: Case): Promise<void> {
  const x = (t.node.runs as unknown as { executor: Inside }).executor
  switch (c) {
    case 'correct':
      return
    case 'answers-wrong-correlation':
      await reserveControl(t, x, (_type, run) => ({ ...run, correlation_id: 'not-the-task' }))
      return
    case 'block-shows-endpoint':
      await reserveControl(t, x, (type, run) => type === 'block' ? { ...run, block_reason: `${run.block_reason ?? ''} (reach me at ${t.address})` } : run)
      return
    case 'no-late-run': {
      const original = x.policy!
      // the agent's own policy waits for the caller to be gone; then the delegation is refused, so no run ever exists
      t.node.runs.setPolicy(async (req) => {
        const said = await original(req)
        return req.input.op === 'stall-accept' ? 'no run for a caller that is gone' : said
      })
    }
  }
}

const CASES: Case[] = ['correct', 'answers-wrong-correlation', 'block-shows-endpoint', 'no-late-run']

describe('the Run answers the kit keeps', () => {
  it('keeps each answer that differs from the one before it, and fails the check past KIT_RUN_ANSWERS_MAX', () => {
    const target = '12D3KooWHP8jJ31tCQ42oSSpRPTir3ykenymoWugUfipcdHCzkXu'
    // the kit's bookkeeping only: no node is asked anything
    const kit = new Kit({} as unknown as KitNodes, target)
    const s = kit.scope()
    const run = runOfTicket({
      run_id: newRunId(target), executor: target, correlation_id: 'task', capability: { capability_id: 'cap:x', version: '1.0.0' },
      parent_run: null, handoff_from: null, delegator: target, authorized: []
    } as unknown as RunTicket)
    const answer = (n: number): Frame => ({ id: 1, ok: true, body: { run: { ...run, last_seq: n } } })
    s.runOf(answer(1), 'first')
    s.runOf(answer(1), 'the same again')
    expect(kit.answers.map(a => a.what)).toEqual(['first'])
    for (let n = 2; n <= KIT_RUN_ANSWERS_MAX; n++) s.runOf(answer(n), `answer ${n}`)
    expect(kit.answers).toHaveLength(KIT_RUN_ANSWERS_MAX)
    expect(() => s.runOf(answer(0), 'one too many')).toThrow(CheckFailure)
    expect(() => s.runOf(answer(0), 'one too many')).toThrow(/KIT_RUN_ANSWERS_MAX/)
    expect(kit.answers).toHaveLength(KIT_RUN_ANSWERS_MAX)
  })
})

describeKitRuns('the conformance kit judges every Run answer and shows the checks\' own evidence', CASES, prepare, EXPECTED, 180_000, (report) => {
  it('correct: every clause passes, and no cleanup cancel or reach probe is the error frame of a passed check', () => {
    const r = report('correct')
    expectExactFailures(r, { clauses: [], checks: [], message: {} })
    for (const check of r.checks) {
      if (CANCEL_PROBES.has(check.id)) continue
      expect([check.id, check.evidence.frames.filter(f => f.includes('"request":"cancel"'))]).toEqual([check.id, []])
    }
    expect(r.checks.find(ch => ch.id === 'discover')?.evidence.frames).toEqual([])
  })

  it('no-late-run: handle-undelivered is undecided (no run to judge), not failed; every other clause passes', () => {
    const r = report('no-late-run')
    const notPassed = r.checks.filter(ch => ch.status !== 'pass')
    expect(notPassed.map(ch => [ch.id, ch.status])).toEqual([['handle-undelivered', 'inconclusive']])
    expect(notPassed[0]?.message).toMatch(/no run was created for the late-accepted delegation .*cannot decide/)
    for (const cl of r.clauses) {
      expect([cl.id, cl.status]).toEqual([cl.id, cl.id === 'AAP-DELEGATE-FAILED-EVENT' ? 'inconclusive' : cl.checks.length === 0 ? 'n/a' : 'pass'])
    }
    expect(r.summary.must_inconclusive).toEqual(['AAP-DELEGATE-FAILED-EVENT'])
  })
})
