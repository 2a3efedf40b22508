/**
 * Three rules the conformance kit did not hold a target to, each shown to
 * fail on a real node running the conformance agent that breaks it (one of
 * its protocols served again with the node's own logic and one behaviour
 * altered), and to pass on a correct node:
 *
 *  - tag-not-announced: the target's card (as get_card serves it) carries a
 *    tag the target is not discoverable by: discover-tags fails;
 *  - held-cards-any-key: the target answers get_held_cards by any provider
 *    key with its own card, which lacks the tag the key names: discover-tags
 *    fails;
 *  - capability-transport: the run.completed of a run names how its
 *    capability is reached (`mcp+stdio:/usr/local/bin/…`): capability-by-ref
 *    fails (C1-NO-TRANSPORT);
 *  - late-run-hidden: a delegation answered DELEGATION_REFUSED gets a run a
 *    moment later, and the target serves that task's records unsigned when
 *    read by correlation: no-late-runs reports the late run as a late run.
 *
 * A correct target whose card carries a tag of its own passes every clause,
 * and is found by discover by that tag.
 */
import type { PrivateKey } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { issueCard, type AgentCard } from '../src/card/card.ts'
import { isGetHeldCardsRequest } from '../src/card/held-cards.ts'
import { CARD_MAX_FRAME_BYTES, CARD_PROTOCOL, EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL } from '../src/constants.ts'
import { correlationPage, isSyncCorrelationRequest, isSyncRunRequest, runPage, type SyncResponse } from '../src/events/sync.ts'
import { signEvent } from '../src/runlog/event.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { schema } from '../src/schema/validate.ts'
import { method, serve } from '../src/wire/rpc.ts'
import type { ConformanceReport } from '../src/conformance/runner.ts'
import { expectExactFailures, kitRuns, refuseThenRun, type ExpectedFailures, type Target } from './fixtures/broken-targets.ts'

type Case = 'correct-tagged' | 'tag-not-announced' | 'held-cards-any-key' | 'capability-transport' | 'late-run-hidden'

/** The parts of discovery a breakage reuses (private in the product). */
interface DiscoveryInside {
  heldOfKey: (key: string) => Promise<AgentCard[]>
  held: { answer: (agents: Iterable<string>, own?: AgentCard) => AgentCard[] }
}

const TARGET_TAG = 'conformance-target-tag'
const isGetCardRequest = schema<Record<string, never>>('aap:card#/definitions/GetCardRequest')

const EXPECTED: Record<Case, ExpectedFailures> = {
  'correct-tagged': { clauses: [], checks: [], message: {} },
  'tag-not-announced': {
    clauses: ['AAP-DISCOVER-TAGS', 'AAP-CONF-PRIMITIVES'],
    checks: ['discover-tags'],
    message: { 'discover-tags': /discover by tag conformance-target-tag did not find the target \w+ \(its card carries the tag\)/ }
  },
  'held-cards-any-key': {
    clauses: ['AAP-DISCOVER-TAGS', 'AAP-CONF-PRIMITIVES'],
    checks: ['discover-tags'],
    message: { 'discover-tags': /the target answers get_held_cards by the key of tag aap-conformance-[a-z0-9]+ with the card of the target \w+, which lacks the tag/ }
  },
  'capability-transport': {
    clauses: ['AAP-CAP-TRANSPORT', 'C1-CAPREF-ONLY', 'C1-NO-TRANSPORT'],
    checks: ['capability-by-ref'],
    message: { 'capability-by-ref': /how the capability is reached shows above the transport .*payload\.via: a capability transport \(mcp\+stdio:\/usr\/local\/bin\/conformance-tool\)/ }
  },
  // the late run is reported as a late run, naming it, though its task's records cannot all be read
  'late-run-hidden': {
    clauses: ['AAP-ERROR-DELEGATION_REFUSED', 'AAP-CONF-ERRORS'],
    checks: ['refusal', 'no-late-runs'],
    message: {
      'no-late-runs': /the refused delegation: refused, yet 1 run\(s\) exist for conf-[a-z0-9]+-refuse later: \w+:[0-9a-f]+ \(not all their records can be read/,
      refusal: /found at the end of the kit run: the refused delegation: refused, yet 1 run\(s\) exist/
    }
  }
}

const CASES = Object.keys(EXPECTED) as Case[]

/** Runs a late-run-hidden target failed to create (none expected): a failure here would make the breakage itself unreal. */
const lateCreateErrors: string[] = []

/** Serve the events protocol again with the node's own pages; `alter` rewrites each page's events (`byCorrelation`: a correlation read). */
async function reserveEvents (t: Target, alter: (events: AgentEvent[], byCorrelation: boolean) => Promise<AgentEvent[]>): Promise<void> {
  const log = t.node.events.log
  const page = async (p: SyncResponse, byCorrelation: boolean): Promise<SyncResponse> => ({ ...p, events: await alter(p.events, byCorrelation) })
  await t.node.host.unhandle(EVENTS_SYNC_PROTOCOL)
  await serve(t.node.host, {
    protocol: EVENTS_SYNC_PROTOCOL,
    maxFrameBytes: EVENTS_SYNC_MAX_FRAME_BYTES,
    methods: {
      run: method(isSyncRunRequest, async (req) => page(await runPage(log, req), false)),
      correlation: method(isSyncCorrelationRequest, async (req) => page(await correlationPage(log, req), true))
    }
  })
}

/** Serve the card protocol again: `getCard` answers get_card, `byKey` a get_held_cards by key (agents as the node does). */
async function reserveCards (t: Target, getCard: () => Promise<AgentCard>, byKey: (key: string) => Promise<AgentCard[]>): Promise<void> {
  const d = t.node.discovery as unknown as DiscoveryInside
  await t.node.host.unhandle(CARD_PROTOCOL)
  await serve(t.node.host, {
    protocol: CARD_PROTOCOL,
    maxFrameBytes: CARD_MAX_FRAME_BYTES,
    methods: {
      get_card: method(isGetCardRequest, async () => ({ card: await getCard() })),
      get_held_cards: method(isGetHeldCardsRequest, async (req) => ({
        cards: req.agents !== undefined ? d.held.answer(req.agents, req.agents.includes(t.node.agentId) ? t.node.card : undefined) : await byKey(req.key ?? '')
      }))
    }
  })
}

async function prepare (t: Target, c: Case): Promise<void> {
  const key = (t.node as unknown as { key: PrivateKey }).key
  const own = t.node.card!
  switch (c) {
    case 'correct-tagged':
      await t.node.publishCard({ name: own.name, description: own.description, capabilities: [...own.capabilities], tags: [TARGET_TAG] })
      return
    case 'tag-not-announced': {
      // get_card serves a newer card with a tag the node never announced (nor names in its held-cards answers)
      const tagged = await issueCard(key, { name: own.name, description: own.description, capabilities: [...own.capabilities], tags: [TARGET_TAG] }, own.seq + 1)
      const d = t.node.discovery as unknown as DiscoveryInside
      await reserveCards(t, async () => tagged, async (k) => d.heldOfKey(k))
      return
    }
    case 'held-cards-any-key': {
      // whatever key is asked for, the node's own card comes first, as if it were announced under it
      const d = t.node.discovery as unknown as DiscoveryInside
      await reserveCards(t, async () => t.node.card!, async (k) => [t.node.card!, ...(await d.heldOfKey(k)).filter(x => x.agent_id !== t.node.agentId)])
      return
    }
    case 'capability-transport':
      // the last event of the capability-by-ref run names how the capability is reached (re-signed: a well-signed record of its own)
      await reserveEvents(t, async (events) => Promise.all(events.map(async (e) => {
        if (e.type !== 'run.completed' || !e.correlation_id.endsWith('-capref')) return e
        const { signature: _s, ...rest } = e
        return signEvent(key, { ...rest, payload: { ...e.payload, via: 'mcp+stdio:/usr/local/bin/conformance-tool' } } as never)
      })))
      return
    case 'late-run-hidden': {
      refuseThenRun(t, lateCreateErrors)
      // read by correlation, the refused task's records come with a signature that does not verify
      await reserveEvents(t, async (events, byCorrelation) => events.map(e => byCorrelation && e.correlation_id.endsWith('-refuse') ? { ...e, signature: `${e.signature.slice(0, -4)}AAAA` } : e))
    }
  }
}

describe('the conformance kit: discovery by tags, the capability transport, late runs among unreadable records', () => {
  let targets = new Map<Case, Target>()
  let reports = new Map<Case, ConformanceReport>()

  beforeAll(async () => {
    ({ targets, reports } = await kitRuns(CASES, prepare))
  }, 240_000)

  afterAll(async () => { await Promise.all([...targets.values()].map(async t => t.node.stop())) })

  for (const c of CASES) {
    it(`${c}: ${EXPECTED[c].clauses.length === 0 ? 'every clause passes' : `exactly ${EXPECTED[c].clauses.join(', ')} fail`}`, () => {
      expectExactFailures(reports.get(c)!, EXPECTED[c])
    })
  }

  it('a correct target is found by discover by its own tag, and the kit says so', () => {
    const check = reports.get('correct-tagged')!.checks.find(x => x.id === 'discover-tags')!
    expect(check.status).toBe('pass')
    expect(check.evidence.notes.some(n => n.startsWith(`discover by tag ${TARGET_TAG} found the target `))).toBe(true)
    expect(lateCreateErrors).toEqual([])
  })
})
