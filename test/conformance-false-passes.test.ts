/**
 * Targets the conformance kit once passed although each is wrong in one way
 * a check only saw at the wrong moment, or never asked about. Each breakage
 * is made here, on a real node running the conformance agent, by serving one
 * of its protocols again with the node's own logic and one behaviour altered:
 *
 *  - cancel-no-correlation: the run.failed of a cancel is served without
 *    correlation_id (re-signed by the target: a well-signed record of its own);
 *  - cancel-no-event: a cancel moves the run to failed, but its run.failed is
 *    never served (the log stops short of Run.last_seq);
 *  - wrong-control: a handoff of an unknown run answers INVALID_TRANSITION
 *    (not RUN_NOT_FOUND), and a resume of a running run that carries a
 *    resolution is answered as if it had been applied;
 *  - unknown-agent-code: a handoff to an agent that does not exist answers
 *    INVALID_REQUEST (not AGENT_NOT_FOUND);
 *  - refuse-then-run: a delegation answered DELEGATION_REFUSED still gets a
 *    run, created a moment after the refusal;
 *  - handoff-ends-failed: the last event of a run its delegator handed off
 *    (the run.completed naming its successor) is served re-signed as a
 *    run.failed, while get_run says completed.
 *
 * The kit must fail exactly the checks and clauses that name the behaviour
 * (the run-logs and no-late-runs checks read everything back once the other
 * checks are done), and pass every other clause.
 */
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL, EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL
} from '../src/constants.ts'
import { peerIdFromString } from '@libp2p/peer-id'
import { AapError, InvalidRequestError, InvalidTransitionError } from '../src/errors.ts'
import { correlationPage, isSyncCorrelationRequest, isSyncRunRequest, runPage, type SyncResponse } from '../src/events/sync.ts'
import { signEvent } from '../src/runlog/event.ts'
import type { AgentEvent, Run } from '../src/runlog/types.ts'
import { isBlock, isCancel, isControlHandoff, isGetRun, isResume } from '../src/runs/messages.ts'
import { nestedCallLimit } from '../src/runs/protocols.ts'
import type { DelegationPolicy } from '../src/runs/types.ts'
import { method, serve, type CallContext } from '../src/wire/rpc.ts'
import type { ConformanceReport } from '../src/conformance/runner.ts'
import { expectExactFailures, kitRuns, refuseThenRun, type ExpectedFailures, type Target } from './fixtures/broken-targets.ts'

type Breakage = 'cancel-no-correlation' | 'cancel-no-event' | 'wrong-control' | 'unknown-agent-code' | 'refuse-then-run' | 'handoff-ends-failed'

/** The parts of the run service a breakage reuses (private in the product). */
interface Inside {
  applyRemote: (runId: string, ctx: CallContext, command: Record<string, unknown>) => Promise<Run>
  localRun: (runId: string) => Promise<Run>
  actorOf: (run: Run, peer: string) => unknown
  handoff: (runId: string, toAgent: string, context: Record<string, unknown>, actor: unknown, opts: Record<string, unknown>) => Promise<Run>
  create: (run: Run, startedPayload: Record<string, unknown>, idem: undefined) => Promise<Run>
  policy: DelegationPolicy | undefined
}

const EXPECTED: Record<Breakage, ExpectedFailures> = {
  // a record without correlation_id is no AgentEvent: the canceled runs' logs cannot be read whole, and their events lack the correlation
  'cancel-no-correlation': {
    clauses: ['AAP-EVENTS-EMIT', 'AAP-CONF-EVENT-STREAM', 'AAP-EVENT-CORRELATION', 'AAP-CONF-CORRELATION', 'C2-EVENT-CORRELATION'],
    checks: ['run-logs', 'events-correlation'],
    message: { 'run-logs': /must have required property 'correlation_id'/, 'events-correlation': /without the run's correlation_id/ }
  },
  'cancel-no-event': {
    clauses: ['AAP-EVENTS-EMIT', 'AAP-CONF-EVENT-STREAM'],
    checks: ['run-logs'],
    message: { 'run-logs': /its log ends at seq \d+ \(1:run\.started[^)]*\) but the run's last_seq is \d+: the log is cut short/ }
  },
  'wrong-control': {
    clauses: ['AAP-ERROR-RUN_NOT_FOUND', 'AAP-INVALID-TRANSITION', 'AAP-ERROR-INVALID_TRANSITION', 'AAP-CONF-ERRORS'],
    checks: ['unknown-run', 'invalid-transitions'],
    message: {
      'unknown-run': /handoff of an unknown run: expected RUN_NOT_FOUND, got INVALID_TRANSITION/,
      'invalid-transitions': /resume of a running run with a resolution: expected INVALID_TRANSITION, but it succeeded/
    }
  },
  'unknown-agent-code': {
    clauses: ['AAP-ERROR-AGENT_NOT_FOUND', 'AAP-CONF-ERRORS'],
    checks: ['wrong-to-agent'],
    message: { 'wrong-to-agent': /handoff to an agent that does not exist: expected AGENT_NOT_FOUND, got INVALID_REQUEST/ }
  },
  // the refusal check passed when it ran; the run that appeared later fails it at the end of the kit run
  'refuse-then-run': {
    clauses: ['AAP-ERROR-DELEGATION_REFUSED', 'AAP-CONF-ERRORS'],
    checks: ['refusal', 'no-late-runs'],
    message: { refusal: /found at the end of the kit run: the refused delegation: refused, yet 1 run\(s\) exist for conf-[a-z0-9]+-refuse later/ }
  },
  // a handed-off run ends with the run.completed that names its successor (protocols/handoff.md, step 4)
  'handoff-ends-failed': {
    clauses: ['AAP-EVENTS-EMIT', 'AAP-CONF-EVENT-STREAM', 'AAP-HANDOFF-HISTORY', 'C4-HISTORY', 'AAP-EVENT-REPLAY'],
    checks: ['handoff-history', 'replay', 'run-logs'],
    message: {
      'handoff-history': /the old run's last event is run\.failed .*, not the run\.completed that hands off to/,
      replay: /the old run's last event is run\.failed .*, not the run\.completed that hands off to/,
      'run-logs': /the run is completed but its log ends with run\.failed/
    }
  }
}

const BREAKAGES = Object.keys(EXPECTED) as Breakage[]

/** The run.failed a cancel writes. */
const isCancelEvent = (e: AgentEvent): boolean => e.type === 'run.failed' && (e.payload as Record<string, unknown>).reason === 'canceled'

/** Serve the events protocol again with the node's own pages, each page's events passed through `alter`. */
async function reserveEvents (t: Target, alter: (events: AgentEvent[]) => Promise<AgentEvent[]>): Promise<void> {
  const log = t.node.events.log
  const page = async (p: SyncResponse): Promise<SyncResponse> => ({ ...p, events: await alter(p.events) })
  await t.node.host.unhandle(EVENTS_SYNC_PROTOCOL)
  await serve(t.node.host, {
    protocol: EVENTS_SYNC_PROTOCOL,
    maxFrameBytes: EVENTS_SYNC_MAX_FRAME_BYTES,
    methods: {
      run: method(isSyncRunRequest, async (req) => page(await runPage(log, req))),
      correlation: method(isSyncCorrelationRequest, async (req) => page(await correlationPage(log, req)))
    }
  })
}

/** Runs a refuse-then-run target failed to create (none expected): a failure here would make the breakage itself unreal. */
const lateCreateErrors: string[] = []

/** Serve the control protocol again with the node's own logic, the chosen behaviours wrong. */
async function reserveControl (t: Target, x: Inside, o: { resumeRunningAccepted?: true, unknownRunCode?: true, unknownAgentCode?: true }): Promise<void> {
  await t.node.host.unhandle(CONTROL_PROTOCOL)
  await serve(t.node.host, {
    protocol: CONTROL_PROTOCOL,
    maxFrameBytes: CONTROL_MAX_FRAME_BYTES,
    methods: {
      block: method(isBlock, async (req, ctx) => ({ run: await x.applyRemote(req.run_id, ctx, { type: 'block', reason: req.reason, checkpoint_id: req.checkpoint_id }) })),
      resume: method(isResume, async (req, ctx) => {
        const run = await x.localRun(req.run_id)
        // a resume of a running run that carries a resolution is answered as if applied
        if (o.resumeRunningAccepted === true && run.state === 'running' && Object.keys(req.resolution).length > 0) return { run }
        return { run: await x.applyRemote(req.run_id, ctx, { type: 'resume', resolution: req.resolution }) }
      }),
      cancel: method(isCancel, async (req, ctx) => ({ run: await x.applyRemote(req.run_id, ctx, { type: 'cancel', reason: req.reason ?? 'canceled by delegator' }) })),
      get_run: method(isGetRun, async (req) => ({ run: await x.localRun(req.run_id) })),
      handoff: method(isControlHandoff, async (req, ctx) => {
        let run: Run
        try {
          run = await x.localRun(req.run_id)
        } catch (err) {
          // the wrong code for a run id that is invalid
          if (o.unknownRunCode === true && err instanceof AapError && err.code === 'RUN_NOT_FOUND') throw new InvalidTransitionError('no such run to hand off')
          throw err
        }
        try {
          return { run: await x.handoff(run.run_id, req.to_agent, req.context, x.actorOf(run, ctx.peer.toString()), { signal: ctx.signal, callTimeoutMs: nestedCallLimit() }) }
        } catch (err) {
          // the wrong code for a receiver the node never heard of (a stalled one it knows still gets AGENT_NOT_FOUND)
          const unheard = !(await t.node.host.peerStore.has(peerIdFromString(req.to_agent)))
          if (o.unknownAgentCode === true && err instanceof AapError && err.code === 'AGENT_NOT_FOUND' && unheard) throw new InvalidRequestError('no such agent to hand off to')
          throw err
        }
      })
    }
  })
}

async function breakTarget (t: Target, b: Breakage): Promise<void> {
  const key = (t.node as unknown as { key: PrivateKey }).key
  const x = (t.node.runs as unknown as { executor: Inside }).executor
  switch (b) {
    case 'refuse-then-run': {
      refuseThenRun(t, lateCreateErrors)
      return
    }
    case 'cancel-no-correlation':
      await reserveEvents(t, async (events) => Promise.all(events.map(async (e) => {
        if (!isCancelEvent(e)) return e
        const { signature: _s, correlation_id: _c, ...rest } = e
        return signEvent(key, rest as never)
      })))
      return
    case 'handoff-ends-failed':
      await reserveEvents(t, async (events) => Promise.all(events.map(async (e) => {
        const p = e.payload as Record<string, unknown>
        // only handoffs the delegator asked for: the handoff check waits for the run.completed of the agent's own
        if (e.type !== 'run.completed' || p.transition !== 'handoff' || p.by === t.node.agentId) return e
        const { signature: _s, ...rest } = e
        return signEvent(key, { ...rest, type: 'run.failed' } as never)
      })))
      return
    case 'cancel-no-event':
      await reserveEvents(t, async (events) => events.filter(e => !isCancelEvent(e)))
      return
    case 'wrong-control':
      await reserveControl(t, x, { resumeRunningAccepted: true, unknownRunCode: true })
      return
    case 'unknown-agent-code':
      await reserveControl(t, x, { unknownAgentCode: true })
  }
}

describe('the conformance kit against targets it once passed', () => {
  let targets = new Map<Breakage, Target>()
  let reports = new Map<Breakage, ConformanceReport>()

  beforeAll(async () => {
    ({ targets, reports } = await kitRuns(BREAKAGES, breakTarget))
  }, 180_000)

  afterAll(async () => { await Promise.all([...targets.values()].map(async t => t.node.stop())) })

  for (const b of BREAKAGES) {
    it(`${b}: exactly ${EXPECTED[b].clauses.join(', ')} fail`, () => {
      const r = reports.get(b)!
      expectExactFailures(r, EXPECTED[b])
      expect(r.summary.must_failed.length).toBeGreaterThan(0)
    })
  }

  it('a check failed at the end of the kit run keeps its evidence', () => {
    const refusal = reports.get('refuse-then-run')!.checks.find(c => c.id === 'refusal')!
    expect(refusal.evidence.notes.some(n => n.includes('refused, yet 1 run(s) exist'))).toBe(true)
    const late = reports.get('refuse-then-run')!.checks.find(c => c.id === 'no-late-runs')!
    expect(late.evidence.events.some(e => e.endsWith('#1 run.started'))).toBe(true)
    expect(lateCreateErrors).toEqual([])
  })
})
