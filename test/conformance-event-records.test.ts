/**
 * The kit takes the events it reads over /aap/events/0.1.0 the way aap-mesh's
 * own sync client does: every page a SyncResponse, every event an AgentEvent
 * signed by the executor its run id names, each run's events chained by seq
 * and prev hash. A target that serves records failing any of these fails the
 * checks that read them, with the reason and the record as evidence, and the
 * kit exits non-zero; before, each of these targets passed every clause.
 */
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL } from '../src/constants.ts'
import { correlationPage, isSyncCorrelationRequest, isSyncRunRequest, runPage, type SyncResponse } from '../src/events/sync.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { signEvent } from '../src/runlog/event.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { method, serve } from '../src/wire/rpc.ts'
import { runConformance, type ConformanceReport } from '../src/conformance/runner.ts'
import { startTarget, type Target } from './fixtures/broken-targets.ts'

type Alter = (events: AgentEvent[]) => Promise<AgentEvent[]>

const wrongKey = await generateKeyPair('Ed25519')

const ALTERATIONS: Record<string, { alter: Alter, reason: RegExp }> = {
  // what the reviewer found: no signature, no prev, no executor, no timestamp
  unsigned: {
    alter: async (events) => events.map(e => {
      const { signature: _s, prev: _p, executor: _x, at: _a, ...rest } = e
      return rest as AgentEvent
    }),
    reason: /not a signed AgentEvent: the sync page does not match its schema at \/events\/\d+: must have required property/
  },
  // a payload changed after signing
  tampered: {
    alter: async (events) => events.map(e => e.type === 'run.started' ? { ...e, payload: { ...e.payload, tampered: true } } : e),
    reason: /not a signed AgentEvent: event signature does not verify/
  },
  // signed, but by an agent that does not execute the run
  misattributed: {
    alter: async (events) => Promise.all(events.map(async ({ signature: _s, ...e }) => signEvent(wrongKey, { ...e, executor: agentIdOf(wrongKey) }))),
    reason: /not a signed AgentEvent: event is attributed to an agent that does not execute its run/
  },
  // signed by the run's executor, but not chained to the event before it
  unchained: {
    alter: async () => { throw new Error('set per target: it signs with the target\'s key') },
    reason: /the events do not chain: event \S+#2 does not chain to its predecessor/
  }
}

/** The target's events with a wrong prev hash after seq 1, signed again with the target's own key. */
function unchain (t: Target): Alter {
  const key = (t.node as unknown as { key: PrivateKey }).key
  return async (events) => Promise.all(events.map(async ({ signature: _s, ...e }) => e.seq === 1 ? signEvent(key, e) : signEvent(key, { ...e, prev: 'f'.repeat(64) })))
}

/** Serve the target's own events, altered, on /aap/events/0.1.0. */
async function alterEvents (t: Target, alter: Alter): Promise<void> {
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

describe('the kit refuses event records aap-mesh\'s own sync client would refuse', () => {
  const targets: Target[] = []
  const reports = new Map<string, ConformanceReport>()

  beforeAll(async () => {
    // the kits run side by side, as in conformance-broken.test.ts
    await Promise.all(Object.entries(ALTERATIONS).map(async ([name, a]) => {
      const t = await startTarget()
      targets.push(t)
      await alterEvents(t, name === 'unchained' ? unchain(t) : a.alter)
      reports.set(name, await runConformance({ target: t.address }))
    }))
  }, 180_000)

  afterAll(async () => { await Promise.all(targets.map(async t => t.node.stop())) })

  for (const [name, a] of Object.entries(ALTERATIONS)) {
    it(`${name}: the checks that read the events fail, naming the bad record; a MUST fails`, () => {
      const r = reports.get(name)!
      const failed = r.checks.filter(c => c.status !== 'pass')
      const summary = JSON.stringify(failed.map(c => [c.id, c.message]))
      // the checks that read a run's events back
      for (const id of ['delegate-correlation', 'event-stream', 'states', 'replay']) expect(failed.map(c => c.id), summary).toContain(id)
      for (const c of failed.filter(c => ['delegate-correlation', 'event-stream', 'states'].includes(c.id))) {
        expect(c.status).toBe('fail')
        expect(c.message, c.id).toMatch(a.reason)
      }
      // checks that never read events still pass: the target is otherwise sound
      for (const id of ['unknown-run', 'card-capref', 'wrong-to-agent', 'forged-handoff']) expect(r.checks.find(c => c.id === id)?.status, id).toBe('pass')
      expect(r.summary.must_failed).toEqual(expect.arrayContaining(['AAP-EVENTS-EMIT', 'AAP-CONF-EVENT-STREAM', 'AAP-RUN-CORRELATION']))
      if (name !== 'unchained') {
        // the record itself is the evidence
        const stream = failed.find(c => c.id === 'event-stream')!
        expect(stream.evidence.events.some(e => e.startsWith('{"record":')), JSON.stringify(stream.evidence)).toBe(true)
      }
    })
  }
})
