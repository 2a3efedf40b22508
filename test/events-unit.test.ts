/**
 * The pieces of the events layer that need no network: topic names, event
 * verification, sync pages (bounds and cursors, straight on a log), the
 * replay builder and the subscription's ordering and overflow rules.
 */
import { getEventListeners } from 'node:events'
import { describe, expect, it } from 'vitest'
import { generateKeyPair } from '@libp2p/crypto/keys'
import type { PrivateKey } from '@libp2p/interface'
import { MemoryDatastore } from 'datastore-core'
import {
  EVENT_SIGNING_DOMAIN, EVENTS_TOPIC_PREFIX, SYNC_MAX_EVENTS_PER_RESPONSE, SYNC_MAX_RESPONSE_BYTES
} from '../src/constants.ts'
import { EventLog } from '../src/runlog/event-log.ts'
import { checkChain, eventHash, signEvent, verifyEvent } from '../src/runlog/event.ts'
import { buildReplay } from '../src/events/replay.ts'
import { EventSubscription, SubscriberOverflowError } from '../src/events/subscription.ts'
import { CatchUp } from '../src/events/catch-up.ts'
import type { CorrTrack, RunTrack } from '../src/events/track.ts'
import { Mutex } from '../src/util/concurrency.ts'
import { correlationPage, isSyncResponse, runPage } from '../src/events/sync.ts'
import { correlationTopic, parseCorrelationTopic } from '../src/events/topic.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { sign } from '../src/identity/signing.ts'
import type { AgentEvent, AgentEventType } from '../src/runlog/types.ts'
import { rejectsWith } from './helpers.ts'

interface Agent { key: PrivateKey, id: string }

async function agent (): Promise<Agent> {
  const key = await generateKeyPair('Ed25519')
  return { key, id: agentIdOf(key) }
}

/** A run log signed by its executor: each step is [type, payload]. */
async function runLog (exec: Agent, runId: string, correlationId: string, steps: Array<[AgentEventType, Record<string, unknown>]>, at = '2026-01-01T00:00:00.000Z'): Promise<AgentEvent[]> {
  const out: AgentEvent[] = []
  for (const [type, payload] of steps) {
    const prev = out.at(-1)
    out.push(await signEvent(exec.key, {
      run_id: runId, correlation_id: correlationId, type, payload, at, seq: out.length + 1, prev: prev === undefined ? null : eventHash(prev), executor: exec.id
    }))
  }
  return out
}

describe('topic names', () => {
  it('builds and parses /aap/events/0.1.0/<correlation_id>', () => {
    for (const id of ['task-01', 'task_01J0K7', 'a', 'hacp:task/42.x', 'x'.repeat(128)]) {
      const topic = correlationTopic(id)
      expect(topic).toBe(`${EVENTS_TOPIC_PREFIX}${id}`)
      expect(topic.startsWith('/aap/events/0.1.0/')).toBe(true)
      expect(parseCorrelationTopic(topic)).toBe(id)
    }
  })

  it('refuses ids that are not TaskIds, and parses no other topic', () => {
    for (const id of ['', ' ', 'a b', 'é', 'x'.repeat(129), 'a\nb', 'a?b']) {
      expect(() => correlationTopic(id)).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }))
    }
    for (const topic of ['/aap/events/0.1.0/', '/aap/events/0.2.0/task', '/other/task', `${EVENTS_TOPIC_PREFIX}a b`, 'task']) {
      expect(parseCorrelationTopic(topic)).toBeUndefined()
    }
  })
})

describe('event verification', () => {
  it('accepts the executor\'s events and refuses unsigned, forged, misattributed, mutated and oversized ones', async () => {
    const exec = await agent()
    const other = await agent()
    const [e1, e2] = await runLog(exec, `${exec.id}:r1`, 'c1', [['run.started', {}], ['run.progress', { step: 1 }]]) as [AgentEvent, AgentEvent]
    expect(await verifyEvent(e2)).toEqual(e2)
    checkChain([e1, e2], undefined)
    const { signature: _s, ...unsigned } = e2
    await rejectsWith(verifyEvent(unsigned), 'INVALID_REQUEST')
    await rejectsWith(verifyEvent({ ...unsigned, signature: await sign(other.key, EVENT_SIGNING_DOMAIN, unsigned) }), 'INVALID_SIGNATURE')
    await rejectsWith(verifyEvent(await signEvent(other.key, { ...unsigned, executor: other.id })), 'INVALID_SIGNATURE')
    await rejectsWith(verifyEvent({ ...e2, payload: { step: 2 } }), 'INVALID_SIGNATURE')
    await rejectsWith(verifyEvent({ ...e2, extra: 1 }), 'INVALID_REQUEST')
    const big = { ...unsigned, payload: { blob: 'x'.repeat(33 * 1024) } }
    await rejectsWith(verifyEvent({ ...big, signature: await sign(exec.key, EVENT_SIGNING_DOMAIN, big) }), 'INVALID_REQUEST')
    expect(() => { checkChain([e2], undefined) }).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }))
    expect(() => { checkChain([e1, { ...e2, prev: eventHash(e2) }], undefined) }).toThrow(expect.objectContaining({ code: 'INVALID_REQUEST' }))
  })

  it('remembers only signatures that verified: an event met again passes, any other bytes or signature are checked', async () => {
    const exec = await agent()
    const [e1] = await runLog(exec, `${exec.id}:r2`, 'c2', [['run.started', { n: 1 }]]) as [AgentEvent]
    expect(await verifyEvent(e1)).toEqual(e1)
    // the same event again (from the cache), and a re-encoded copy of it
    expect(await verifyEvent(JSON.parse(JSON.stringify(e1)))).toEqual(e1)
    // the verified signature on other bytes, and other signature bytes on the verified event
    await rejectsWith(verifyEvent({ ...e1, payload: { n: 2 } }), 'INVALID_SIGNATURE')
    await rejectsWith(verifyEvent({ ...e1, at: '2026-01-01T00:00:00.001Z' }), 'INVALID_SIGNATURE')
    const sig = Buffer.from(e1.signature, 'base64url')
    sig[10] = (sig[10] ?? 0) ^ 1
    await rejectsWith(verifyEvent({ ...e1, signature: sig.toString('base64url') }), 'INVALID_SIGNATURE')
    // a forgery that failed once fails again
    await rejectsWith(verifyEvent({ ...e1, payload: { n: 2 } }), 'INVALID_SIGNATURE')
  })
})

describe('sync pages on a log', () => {
  it('bounds a run page by bytes as well as by count, and resumes after any seq', async () => {
    const exec = await agent()
    const runId = `${exec.id}:big`
    const blob = 'y'.repeat(30 * 1024)
    const events = await runLog(exec, runId, 'c-big', Array.from({ length: 70 }, (_v, i) => [i === 0 ? 'run.started' : 'run.progress', { i, blob }]))
    const log = new EventLog(new MemoryDatastore())
    await log.append(events)
    let after = 0
    const seen: AgentEvent[] = []
    for (let pages = 0; pages < 10; pages++) {
      const page = await runPage(log, { run_id: runId, after_seq: after })
      expect(isSyncResponse(page)).toBe(true)
      expect(Buffer.byteLength(JSON.stringify(page.events))).toBeLessThanOrEqual(SYNC_MAX_RESPONSE_BYTES)
      seen.push(...page.events)
      after = page.events.at(-1)?.seq ?? after
      if (!page.more) break
    }
    expect(seen.map(e => e.seq)).toEqual(events.map(e => e.seq))
    const small = await runPage(log, { run_id: runId, after_seq: 68, limit: 1 })
    expect(small.events.map(e => e.seq)).toEqual([69])
    expect(small.more).toBe(true)
    expect((await runPage(log, { run_id: runId, after_seq: 70 }))).toEqual({ events: [], more: false })
    // head and read go key by key on the contiguous log
    expect((await log.head(runId))?.seq).toBe(70)
    for (const n of [1, 2, 3, 64, 65]) {
      const l = new EventLog(new MemoryDatastore())
      await l.append(events.slice(0, n))
      expect((await l.head(runId))?.seq, `head of a ${n}-event log`).toBe(n)
      expect((await l.read(runId, n - 1)).map(e => e.seq)).toEqual([n])
    }
    expect(await log.head(`${exec.id}:none`)).toBeUndefined()
    expect(await log.read(`${exec.id}:none`)).toEqual([])
  })

  it('walks a correlation run by run with an (after_run, after_seq) cursor, never mixing task-1 with task-10', async () => {
    const exec = await agent()
    const log = new EventLog(new MemoryDatastore())
    const r1 = await runLog(exec, `${exec.id}:a`, 'task-1', [['run.started', {}], ['run.progress', {}], ['run.completed', {}]])
    const r2 = await runLog(exec, `${exec.id}:b`, 'task-1', [['run.started', {}], ['run.failed', {}]])
    const r10 = await runLog(exec, `${exec.id}:a0`, 'task-10', [['run.started', {}]])
    await log.append([...r1, ...r2, ...r10])
    expect((await log.runsOf('task-1')).sort()).toEqual([`${exec.id}:a`, `${exec.id}:b`])
    expect(await log.read(`${exec.id}:a`)).toEqual(r1)

    const walked: AgentEvent[] = []
    let cursor: AgentEvent | undefined
    for (let pages = 0; pages < 10; pages++) {
      const page = await correlationPage(log, cursor === undefined
        ? { correlation_id: 'task-1', limit: 2 }
        : { correlation_id: 'task-1', after_run: cursor.run_id, after_seq: cursor.seq, limit: 2 })
      expect(page.events.length).toBeLessThanOrEqual(2)
      walked.push(...page.events)
      cursor = page.events.at(-1) ?? cursor
      if (!page.more) break
    }
    expect(walked).toEqual([...r1, ...r2])
    expect(await correlationPage(log, { correlation_id: 'task-1', limit: SYNC_MAX_EVENTS_PER_RESPONSE })).toEqual({ events: [...r1, ...r2], more: false })
  })
})

describe('replay builder', () => {
  it('orders runs by lineage (delegation, sub-delegation, handoff) and pairs each checkpoint with its resume', async () => {
    const [a, b, c, d] = await Promise.all([agent(), agent(), agent(), agent()])
    const cap = { capability_id: 'cap:x', version: '1' }
    const rb = `${b.id}:root`
    const rd = `${d.id}:child`
    const rc = `${c.id}:next`
    // clocks deliberately disagree with lineage: the child's executor is "earlier"
    const logB = await runLog(b, rb, 'T', [
      ['run.started', { delegator: a.id, capability: cap, parent_run: null }],
      ['run.blocked', { checkpoint_id: 'cp-1', reason: 'ask', by: b.id }],
      ['run.progress', { transition: 'resume', checkpoint_id: 'cp-1', resolution: { ok: 1 }, by: a.id }],
      ['run.completed', { transition: 'handoff', handoff_to: { run_id: rc, agent_id: c.id }, by: b.id }]
    ], '2026-01-01T00:00:10.000Z')
    const logD = await runLog(d, rd, 'T', [
      ['run.started', { delegator: b.id, capability: cap, parent_run: rb }],
      ['run.failed', { failure: { code: 'HANDLER_FAILED', message: 'no' } }]
    ], '2026-01-01T00:00:01.000Z')
    const logC = await runLog(c, rc, 'T', [
      ['run.started', { delegator: a.id, capability: cap, parent_run: null, handoff_from: { run_id: rb, agent_id: b.id }, handoff_by: b.id }],
      ['run.completed', { output: { done: true } }]
    ], '2026-01-01T00:00:20.000Z')
    const replay = buildReplay('T', new Map([[rc, logC], [rd, logD], [rb, logB]]))
    expect(replay.runs.map(r => [r.run_id, r.depth, r.started_by, r.state, r.orphan])).toEqual([
      [rb, 0, 'delegate', 'completed', false],
      [rd, 1, 'delegate', 'failed', false],
      [rc, 1, 'handoff', 'completed', false]
    ])
    expect(replay.transitions.map(t => `${t.kind}@${t.run_id === rb ? 'b' : t.run_id === rc ? 'c' : 'd'}`)).toEqual([
      'delegate@b', 'block@b', 'resume@b', 'handoff@b', 'delegate@d', 'fail@d', 'complete@c'
    ])
    expect(replay.checkpoints).toEqual([{
      run_id: rb, checkpoint_id: 'cp-1', reason: 'ask', blocked_seq: 2, blocked_at: '2026-01-01T00:00:10.000Z', blocked_by: b.id,
      resumed_seq: 3, resumed_at: '2026-01-01T00:00:10.000Z', resolved_by: a.id, resolution: { ok: 1 }, attested: false
    }])
    expect(replay.events).toHaveLength(8)

    // only the successor's side of a handoff held: still one handoff, and the run is flagged as an orphan
    const partial = buildReplay('T', new Map([[rc, logC]]))
    expect(partial.transitions.map(t => t.kind)).toEqual(['handoff', 'complete'])
    expect(partial.runs[0]).toMatchObject({ run_id: rc, orphan: true, depth: 0 })
  })

  it('survives a lineage cycle a lying executor could sign', async () => {
    const x = await agent()
    const r1 = `${x.id}:1`
    const r2 = `${x.id}:2`
    const l1 = await runLog(x, r1, 'T', [['run.started', { parent_run: r2 }]])
    const l2 = await runLog(x, r2, 'T', [['run.started', { parent_run: r1 }]])
    const replay = buildReplay('T', new Map([[r1, l1], [r2, l2]]))
    expect(replay.runs.map(r => r.run_id).sort()).toEqual([r1, r2].sort())
    // nothing is a root; the run the walk enters the cycle by is flagged, the other hangs under it
    expect(replay.runs.map(r => [r.orphan, r.depth])).toEqual([[true, 0], [false, 1]])
  })
})

describe('subscription', () => {
  const ev = (run: string, seq: number): AgentEvent => ({
    run_id: run, correlation_id: 'T', type: 'run.progress', payload: {}, at: '2026-01-01T00:00:00.000Z', seq, prev: null, executor: 'x', signature: 's'
  })

  it('hands each event out once, in order, and ends when closed', async () => {
    const sub = new EventSubscription('T', {}, () => {})
    for (const e of [ev('r', 1), ev('r', 2), ev('r', 1), ev('q', 1), ev('r', 2), ev('r', 3)]) sub.deliver(e)
    const got: string[] = []
    const reading = (async () => { for await (const e of sub) got.push(`${e.run_id}${e.seq}`) })()
    await expect.poll(() => got.length).toBe(4)
    sub.close()
    await reading
    expect(got).toEqual(['r1', 'r2', 'q1', 'r3'])
  })

  it('fails a consumer that falls behind its buffer, and never hands out an event out of order', async () => {
    const slow = new EventSubscription('T', { maxBuffered: 2 }, () => {})
    for (let i = 1; i <= 3; i++) slow.deliver(ev('r', i))
    expect((await slow.next()).value?.seq).toBe(1)
    expect((await slow.next()).value?.seq).toBe(2)
    await expect(slow.next()).rejects.toBeInstanceOf(SubscriberOverflowError)
    expect((await slow.next()).done).toBe(true)

    const gap = new EventSubscription('T', {}, () => {})
    gap.deliver(ev('r', 1))
    gap.deliver(ev('r', 3))
    expect((await gap.next()).value?.seq).toBe(1)
    await expect(gap.next()).rejects.toMatchObject({ code: 'INTERNAL', details: { reason: 'order' } })
  })

  it('leaves no listener on a signal that outlives it, and still ends when that signal aborts', async () => {
    // an A2A handler passes its own stopping signal to every run it follows: one listener per
    // subscription ever made had piled up on it, each keeping its subscription alive
    const stopping = new AbortController()
    let closed = 0
    for (let i = 0; i < 500; i++) {
      const sub = new EventSubscription(`T${i}`, { signal: stopping.signal }, () => { closed++ })
      sub.deliver(ev('r', 1))
      if (i % 2 === 0) sub.close()
      else await sub.return()
    }
    expect(closed).toBe(500)
    expect(getEventListeners(stopping.signal, 'abort')).toHaveLength(0)
    const open = new EventSubscription('T', { signal: stopping.signal }, () => { closed++ })
    expect(getEventListeners(stopping.signal, 'abort')).toHaveLength(1)
    const reading = open.next()
    stopping.abort()
    expect(await reading).toEqual({ value: undefined, done: true })
    expect(open.closed).toBe(true)
    expect(closed).toBe(501)
  })

  it('behind the log: ignores live events, hands out a superseding event it missed, and fails with the reason of a failed read', async () => {
    // a stand-in for the log's catch-up (the real one is in events-catch-up.test.ts): two pages, then live
    const pages = [[ev('r', 1), ev('r', 2)], [ev('r', 3)]]
    const sub = new EventSubscription('T', { maxBuffered: 2 }, () => {})
    sub.readFrom({
      pull: async (s) => {
        s.settleSupersedes()
        const page = pages.shift()
        if (page === undefined) { s.goLive(); return }
        for (const e of page) s.acceptHistory(e)
      }
    })
    expect(sub.catchingUp).toBe(true)
    sub.deliver(ev('r', 9)) // live, while behind: the log has it, in its turn
    expect((await sub.next()).value?.seq).toBe(1)
    expect((await sub.next()).value?.seq).toBe(2)
    // the executor's event replaces what seq 2 held (a delegator's verdict), after the consumer read it
    const own = { ...ev('r', 2), signature: 'executor' }
    sub.supersede(own)
    const third = await sub.next()
    expect([third.value?.seq, third.value?.signature]).toEqual([2, 'executor'])
    expect((await sub.next()).value?.seq).toBe(3)
    // nothing left: live from now on
    const waiting = sub.next()
    await expect.poll(() => sub.catchingUp).toBe(false)
    sub.deliver(ev('r', 4))
    expect((await waiting).value?.seq).toBe(4)
    sub.close()

    const broken = new EventSubscription('T', {}, () => {})
    broken.readFrom({ pull: async () => { throw new Error('disk gone') } })
    await expect(broken.next()).rejects.toMatchObject({ code: 'INTERNAL' })
    expect(broken.closed).toBe(true)
  })

  it('catching up on a real log: a replaced verdict at a seq not read yet, in this run or another, is read in its turn', async () => {
    const log = new EventLog(new MemoryDatastore())
    const withSig = (e: AgentEvent, signature: string): AgentEvent => ({ ...e, signature })
    await log.append([ev('a', 1), ev('a', 2), ev('a', 3), withSig(ev('a', 4), 'verdict'), ev('b', 1), withSig(ev('b', 2), 'verdict')])
    const t = { id: 'T', lock: new Mutex() } as unknown as CorrTrack
    const admitted = { lineage: 'admitted' } as unknown as RunTrack
    const sub = new EventSubscription('T', { maxBuffered: 2 }, () => {})
    sub.readFrom(new CatchUp(t, { log, correlations: { runTrack: async () => admitted, flushCopies: async () => {} } }))
    expect((await sub.next()).value?.seq).toBe(1)
    // the executors' own events take the verdicts' places, in the log (the copy) and for the subscribers
    for (const own of [withSig(ev('a', 4), 'executor'), withSig(ev('b', 2), 'executor')]) {
      await log.append([own])
      sub.supersede(own)
    }
    const got: string[] = []
    while (got.length < 5) {
      const r = await sub.next()
      if (r.done === true) break
      got.push(`${r.value.run_id}${r.value.seq}:${r.value.signature}`)
    }
    // before, the first pull failed the subscription ('order': handed a#4 after #1)
    expect(got).toEqual(['a2:s', 'a3:s', 'a4:executor', 'b1:s', 'b2:executor'])
    sub.close()
  })

  it('ends a call waiting on a pull when it is closed, not when the pull gets its turn', async () => {
    // the pull waits behind the correlation's lock (a long delivery, a write): it never gets its turn here
    const held = Promise.withResolvers<void>()
    const sub = new EventSubscription('T', {}, () => {})
    sub.readFrom({ pull: async () => held.promise })
    const waiting = sub.next()
    sub.close()
    expect(await waiting).toEqual({ value: undefined, done: true })
    held.resolve()
  })

  it('settles every call of next() made before an event comes, in order', async () => {
    // before, a second call replaced the first one's waiter, which then never settled
    const sub = new EventSubscription('T', {}, () => {})
    const first = sub.next()
    const second = sub.next()
    const third = sub.next()
    sub.deliver(ev('r', 1))
    sub.deliver(ev('r', 2))
    sub.close()
    expect((await first).value?.seq).toBe(1)
    expect((await second).value?.seq).toBe(2)
    expect(await third).toEqual({ value: undefined, done: true })
  })
})
