/**
 * What the target said that the kit used to leave unjudged: the Run answers
 * it gave aap-mesh's own client (client-interop drives block, resume, cancel,
 * handoff and get_run through the MeshNode API), and events a read showed
 * that the last read of their run does not hold (an earlier read a later one
 * replaced, a read of the run's task). Real nodes running the conformance
 * agent, each served one way:
 *
 *  - correct: aap-mesh as it is; every clause passes;
 *  - client-answers-wrong-correlation: block, resume and cancel answer a Run
 *    whose correlation_id is not the task's, only for the runs client-interop
 *    makes (the raw checks' runs, and every get_run, stay right);
 *  - earlier-read-shows-endpoint: the first read of event-stream's blocked
 *    run that ends with run.blocked serves it (signed and chained by the
 *    target) with the target's multiaddr in its payload; every later read
 *    serves the run's real log;
 *  - task-read-shows-endpoint: the per-task replay (`correlation` sync) of
 *    the replay check's task serves the old run's run.completed with the
 *    target's multiaddr in its payload; its per-run stream serves it as it is.
 */
import { describe, expect, it } from 'vitest'
import type { PrivateKey } from '@libp2p/interface'
import { EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL } from '../src/constants.ts'
import { Kit, type KitNodes, type WireEvent } from '../src/conformance/kit.ts'
import { correlationPage, isSyncCorrelationRequest, isSyncRunRequest, runPage, type SyncResponse } from '../src/events/sync.ts'
import { signEvent } from '../src/runlog/event.ts'
import type { AgentEvent, Run } from '../src/runlog/types.ts'
import type { RunCommand } from '../src/runs/types.ts'
import type { CallContext } from '../src/wire/rpc.ts'
import { method, serve } from '../src/wire/rpc.ts'
import { describeKitRuns, expectExactFailures, type ExpectedFailures, type Target } from './fixtures/broken-targets.ts'

type Case = 'correct' | 'client-answers-wrong-correlation' | 'earlier-read-shows-endpoint' | 'task-read-shows-endpoint'

const EXPECTED: Record<Exclude<Case, 'correct'>, ExpectedFailures> = {
  'client-answers-wrong-correlation': {
    clauses: ['AAP-CONF-CORRELATION'],
    checks: ['runs-correlation'],
    message: { 'runs-correlation': /runs with another correlation in \d+ answer\(s\): .*(block|resume|cancel) through the MeshNode API/ }
  },
  'earlier-read-shows-endpoint': {
    clauses: ['AAP-CARD-ENDPOINT-HIDDEN'],
    checks: ['no-endpoint-upward'],
    message: { 'no-endpoint-upward': /endpoint data in 1 place\(s\): \S+#\d+ \(a read of \S+ a later read replaced\)/ }
  },
  'task-read-shows-endpoint': {
    clauses: ['AAP-CARD-ENDPOINT-HIDDEN'],
    checks: ['no-endpoint-upward'],
    message: { 'no-endpoint-upward': /endpoint data in 1 place\(s\): \S+#\d+ \(a read of task conf-\w+-replay\)/ }
  }
}

/** The executor's control entry point (private in the product): the control handlers answer with what it returns. */
interface Inside {
  applyRemote: (runId: string, ctx: CallContext, command: RunCommand) => Promise<Run>
}

/** The tasks client-interop delegates (checks-client.ts). */
const CLIENT_TASK = /-client(-[bcf])?$/

/** The event, its payload naming the target's address, signed again by the target (its prev is unchanged). */
async function withEndpoint (t: Target, e: AgentEvent): Promise<AgentEvent> {
  const key = (t.node as unknown as { key: PrivateKey }).key
  const { signature: _old, ...unsigned } = e
  return signEvent(key, { ...unsigned, payload: { ...e.payload, note: `reach me at ${t.address}` } })
}

/** Serve /aap/events/0.1.0 again with the node's own pages, each method's page passed through its `alter`. */
async function reserveEvents (t: Target, alter: { run?: (p: SyncResponse) => Promise<SyncResponse>, correlation?: (p: SyncResponse) => Promise<SyncResponse> }): Promise<void> {
  const log = t.node.events.log
  const same = async (p: SyncResponse): Promise<SyncResponse> => p
  await t.node.host.unhandle(EVENTS_SYNC_PROTOCOL)
  await serve(t.node.host, {
    protocol: EVENTS_SYNC_PROTOCOL,
    maxFrameBytes: EVENTS_SYNC_MAX_FRAME_BYTES,
    methods: {
      run: method(isSyncRunRequest, async (req) => (alter.run ?? same)(await runPage(log, req))),
      correlation: method(isSyncCorrelationRequest, async (req) => (alter.correlation ?? same)(await correlationPage(log, req)))
    }
  })
}

async function prepare (t: Target, c: Case): Promise<void> {
  switch (c) {
    case 'correct':
      return
    case 'client-answers-wrong-correlation': {
      const x = (t.node.runs as unknown as { executor: Inside }).executor
      const original = x.applyRemote.bind(x)
      x.applyRemote = async (runId, ctx, command) => {
        const run = await original(runId, ctx, command)
        return CLIENT_TASK.test(run.correlation_id) ? { ...run, correlation_id: 'not-the-task' } : run
      }
      return
    }
    case 'earlier-read-shows-endpoint': {
      const forked = new Set<string>()
      await reserveEvents(t, {
        run: async (page) => {
          const last = page.events.at(-1)
          if (last?.type !== 'run.blocked' || !last.correlation_id.endsWith('-stream-block') || forked.has(last.run_id)) return page
          forked.add(last.run_id)
          return { ...page, events: [...page.events.slice(0, -1), await withEndpoint(t, last)] }
        }
      })
      return
    }
    case 'task-read-shows-endpoint':
      await reserveEvents(t, {
        correlation: async (page) => ({
          ...page,
          events: await Promise.all(page.events.map(async e => e.type === 'run.completed' && e.correlation_id.endsWith('-replay') && e.executor === t.node.agentId ? withEndpoint(t, e) : e))
        })
      })
  }
}

const CASES: Case[] = ['correct', 'client-answers-wrong-correlation', 'earlier-read-shows-endpoint', 'task-read-shows-endpoint']

describe('the events the kit keeps besides each run\'s last read', () => {
  it('keeps what a replaced read showed once, and not what the last read holds', () => {
    const target = '12D3KooWHP8jJ31tCQ42oSSpRPTir3ykenymoWugUfipcdHCzkXu'
    // the kit's bookkeeping only: no node is asked anything
    const kit = new Kit({} as unknown as KitNodes, target)
    const runId = `${target}:r1`
    const e = (seq: number, note?: string): WireEvent => ({ run_id: runId, correlation_id: 'task', type: 'run.progress', seq, payload: note === undefined ? {} : { note } })
    kit.events.set(runId, [e(1), e(2, 'first')])
    const p = kit.earlier.pending(runId, [e(1), e(2, 'first')], [e(1), e(2, 'second')], 'replaced', 'run')
    kit.earlier.keep(p)
    kit.earlier.keep(kit.earlier.pending(runId, [e(1), e(2, 'first')], [e(1)], 'again', 'correlation'))
    kit.events.set(runId, [e(1), e(2, 'second')])
    expect(kit.eventsRead().map(r => [r.event.seq, r.event.payload, r.what])).toEqual([
      [1, {}, `the last read of ${runId}`], [2, { note: 'second' }, `the last read of ${runId}`], [2, { note: 'first' }, 'replaced']
    ])
    // held again by the last read: judged once, as part of it
    kit.events.set(runId, [e(1), e(2, 'first')])
    expect(kit.eventsRead().map(r => r.what)).toEqual([`the last read of ${runId}`, `the last read of ${runId}`])
    expect(kit.earlier.bytes).toBe(Buffer.byteLength(JSON.stringify(e(2, 'first'))))
  })
})

describeKitRuns('the conformance kit judges the client\'s Run answers and every event read', CASES, prepare, EXPECTED, 240_000, (report) => {
  it('correct: every clause passes', () => {
    expectExactFailures(report('correct'), { clauses: [], checks: [], message: {} })
  })
})
