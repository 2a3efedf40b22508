/**
 * A target that serves none of its own runs' events over the `run` sync still had AAP-EVENT-CORRELATION and
 * C2-EVENT-CORRELATION marked pass: `events-correlation` judged the events the kit read from its own receiver
 * (handoff successors). Now only the target's runs count, and with none the clauses are not shown to pass.
 */
import { afterAll, describe, expect, it } from 'vitest'
import { EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL } from '../src/constants.ts'
import { correlationPage, isSyncCorrelationRequest } from '../src/events/sync.ts'
import { method, serve } from '../src/wire/rpc.ts'
import { runConformance } from '../src/conformance/runner.ts'
import { startTarget, type Target } from './fixtures/broken-targets.ts'

describe('the conformance kit\'s event clauses', () => {
  let t: Target | undefined
  afterAll(async () => { await t?.node.stop() })

  it('a target that serves no run events: AAP-EVENT-CORRELATION should not pass', async () => {
    t = await startTarget()
    const log = t.node.events.log
    // the target answers the `correlation` sync, but not the `run` one (an unknown method: an error frame)
    await t.node.host.unhandle(EVENTS_SYNC_PROTOCOL)
    await serve(t.node.host, {
      protocol: EVENTS_SYNC_PROTOCOL,
      maxFrameBytes: EVENTS_SYNC_MAX_FRAME_BYTES,
      methods: { correlation: method(isSyncCorrelationRequest, async (req) => correlationPage(log, req)) }
    })
    const r = await runConformance({ target: t.address })
        const es = r.checks.find(c => c.id === 'event-stream')
    expect(es?.status).toBe('fail')
    // the target served not one event over `run`: the clause "every event MUST include correlation_id" cannot be shown to pass
    expect(r.clauses.find(c => c.id === 'AAP-EVENT-CORRELATION')?.status).not.toBe('pass')
    expect(r.clauses.find(c => c.id === 'C2-EVENT-CORRELATION')?.status).not.toBe('pass')
  }, 300_000)
})
