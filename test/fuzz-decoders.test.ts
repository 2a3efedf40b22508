/**
 * Fuzz properties of every decoder that reads bytes or JSON from a peer or a
 * user, in-process: the frame decoder, every schema definition, signed cards,
 * card DHT records, signed events and tickets. Each one either returns what it
 * was given, checked, or throws a typed AapError; a mutated signed value is
 * never accepted. Run counts are modest (fixtures/fuzz.ts RUNS).
 */
import fc from 'fast-check'
import { beforeAll, describe, expect, it } from 'vitest'
import common from '../protocols/common.schema.json' with { type: 'json' }
import cardSchema from '../protocols/card.schema.json' with { type: 'json' }
import runsSchema from '../protocols/runs.schema.json' with { type: 'json' }
import eventsSchema from '../protocols/events.schema.json' with { type: 'json' }
import type { PrivateKey } from '@libp2p/interface'
import {
  cardRecordKey, decodeCardRecord, encodeCardRecord, issueCard, selectCardRecord, validateCardRecord, verifyCard, type AgentCard
} from '../src/card/card.ts'
import { MAX_LENGTH_PREFIX_BYTES } from '../src/constants.ts'
import { InvalidRequestError } from '../src/errors.ts'
import { agentIdOf } from '../src/identity/identity.ts'
import { canonicalJson } from '../src/identity/signing.ts'
import { eventHash, newRunId, signEvent, verifyEventSync } from '../src/runlog/event.ts'
import { issueDelegationTicket, issueHandoffTicket, verifyTicket, type RunTicket } from '../src/runlog/ticket.ts'
import type { AgentEvent } from '../src/runlog/types.ts'
import { schema } from '../src/schema/validate.ts'
import { FramingError, FrameDecoder, encodeFrame, parseJson } from '../src/wire/framing.ts'
import { draft, newKey } from './card-fixtures.ts'
import { json, mutate, mutation, RUNS, typedFailure } from './fixtures/fuzz.ts'

const params = { numRuns: RUNS }

/** Cut `bytes` at the given points (each taken modulo the length). */
function split (bytes: Uint8Array, cuts: number[]): Uint8Array[] {
  const at = [...new Set(cuts.map(c => c % (bytes.byteLength + 1)))].sort((a, b) => a - b)
  const out: Uint8Array[] = []
  let from = 0
  for (const c of at) { out.push(bytes.subarray(from, c)); from = c }
  out.push(bytes.subarray(from))
  return out
}

function concat (parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0))
  let at = 0
  for (const p of parts) { out.set(p, at); at += p.byteLength }
  return out
}

describe('fuzz: frames', () => {
  it('frames of any JSON, cut anywhere, come out whole and in order', () => {
    fc.assert(fc.property(fc.array(json, { maxLength: 6 }), fc.array(fc.nat(), { maxLength: 8 }), (values, cuts) => {
      const decoder = new FrameDecoder(1 << 20)
      const frames = split(concat(values.map(v => encodeFrame(v))), cuts).flatMap(chunk => decoder.push(chunk))
      expect(frames.map(f => parseJson(f))).toEqual(values.map(v => JSON.parse(JSON.stringify(v)) as unknown))
      expect(decoder.buffered).toBe(0)
    }), params)
  })

  it('frames dribbled in one byte at a time, then in one chunk with the next frame\'s start, come out whole', () => {
    // the body is filled in place as it comes: before, each byte copied everything buffered so far again
    const big = { data: 'z'.repeat(40_000) }
    const bytes = concat([encodeFrame(big), encodeFrame({ n: 1 }), encodeFrame({ n: 2 })])
    const decoder = new FrameDecoder(1 << 20)
    const out: Uint8Array[] = []
    const firstEnd = encodeFrame(big).byteLength
    for (let i = 0; i < firstEnd - 1; i++) out.push(...decoder.push(bytes.subarray(i, i + 1)))
    expect(out).toEqual([])
    expect(decoder.buffered).toBe(firstEnd - 1)
    out.push(...decoder.push(bytes.subarray(firstEnd - 1)))
    expect(out.map(f => parseJson(f))).toEqual([big, { n: 1 }, { n: 2 }])
    expect(decoder.buffered).toBe(0)
  })

  it('a frame whose length prefix alone has come counts as started (its prefix is buffered)', () => {
    const decoder = new FrameDecoder(1024)
    expect(decoder.push(Uint8Array.from([100]))).toEqual([])
    expect(decoder.buffered).toBe(1)
    expect(decoder.push(new Uint8Array(100))).toHaveLength(1)
    expect(decoder.buffered).toBe(0)
  })

  it('arbitrary bytes give frames within the limit or a FramingError, and never buffer past one frame', () => {
    const max = 64
    fc.assert(fc.property(fc.array(fc.uint8Array({ maxLength: 80 }), { maxLength: 6 }), (chunks) => {
      const decoder = new FrameDecoder(max)
      for (const chunk of chunks) {
        let frames: Uint8Array[]
        try {
          frames = decoder.push(chunk)
        } catch (err) {
          expect(err).toBeInstanceOf(FramingError)
          return
        }
        for (const f of frames) expect(f.byteLength).toBeLessThanOrEqual(max)
        expect(decoder.buffered).toBeLessThanOrEqual(max + MAX_LENGTH_PREFIX_BYTES)
      }
    }), params)
  })

  it('the whole frames before a bad length prefix come out with the error, however the bytes are cut', () => {
    const max = 256
    fc.assert(fc.property(fc.array(json, { maxLength: 5 }), fc.array(fc.nat(), { maxLength: 6 }), fc.boolean(), (values, cuts, oversized) => {
      const good = values.map(v => encodeFrame(v)).filter(f => f.byteLength <= max)
      const bad = oversized ? Uint8Array.from([0x80, 0x80, 0x01]) : new Uint8Array(MAX_LENGTH_PREFIX_BYTES).fill(0xff)
      const decoder = new FrameDecoder(max)
      const out: Uint8Array[] = []
      let error: FramingError | undefined
      for (const chunk of split(concat([...good, bad, encodeFrame({ after: true })]), cuts)) {
        const r = decoder.read(chunk)
        out.push(...r.frames)
        if (r.error !== undefined) { error = r.error; break }
      }
      expect(error?.reason).toBe(oversized ? 'oversized' : 'bad_prefix')
      expect(out.length).toBe(good.length)
    }), params)
  })

  it('a frame body that is not UTF-8 JSON is INVALID_REQUEST, never another error', () => {
    fc.assert(fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
      try {
        parseJson(bytes)
      } catch (err) {
        expect(err).toBeInstanceOf(InvalidRequestError)
      }
    }), params)
  })
})

describe('fuzz: schemas', () => {
  const refs = [common, cardSchema, runsSchema, eventsSchema].flatMap(s => Object.keys(s.definitions).map(d => `${s.$id}#/definitions/${d}`))

  it('every definition answers any JSON with a verdict, and assert throws only INVALID_REQUEST', () => {
    expect(refs.length).toBeGreaterThan(30)
    for (const ref of refs) {
      const check = schema<unknown>(ref)
      fc.assert(fc.property(json, (value) => {
        const ok = check(value)
        try {
          check.assert(value)
          expect(ok).toBe(true)
        } catch (err) {
          expect(err).toBeInstanceOf(InvalidRequestError)
          expect(ok).toBe(false)
        }
      }), { numRuns: 20 })
    }
  })
})

describe('fuzz: signed records', () => {
  let key: PrivateKey
  let card: AgentCard
  let event: AgentEvent
  let next: AgentEvent
  let delegation: RunTicket
  let handoff: RunTicket

  beforeAll(async () => {
    key = await newKey()
    const delegatorKey = await newKey()
    card = await issueCard(key, draft, 7)
    const agent = agentIdOf(key)
    const runId = newRunId(agent)
    event = await signEvent(key, { run_id: runId, correlation_id: 'task-fuzz', type: 'run.started', payload: { note: 'fuzz' }, at: new Date().toISOString(), seq: 1, prev: null, executor: agent })
    next = await signEvent(key, { run_id: runId, correlation_id: 'task-fuzz', type: 'run.progress', payload: { pct: 5, deep: { list: [1, 'two'] } }, at: new Date().toISOString(), seq: 2, prev: eventHash(event), executor: agent })
    delegation = await issueDelegationTicket(delegatorKey, { executor: agent, correlation_id: 'task-fuzz', capability: { capability_id: 'cap:fuzz', version: '1.0.0' }, parent_run: null, authorized: [] })
    handoff = await issueHandoffTicket(key, delegation, agentIdOf(await newKey()))
  })

  /** A mutated copy verifies only when it is canonically the original. */
  const neverAcceptsAChange = async (original: unknown, check: (v: unknown) => unknown): Promise<void> => {
    await fc.assert(fc.asyncProperty(mutation, async (m) => {
      const changed = mutate(original, m)
      const failure = await typedFailure(async () => check(changed))
      const same = (() => { try { return canonicalJson(changed) === canonicalJson(original) } catch { return false } })()
      if (same) expect(failure).toBeUndefined()
      else expect(failure?.code).toMatch(/^(INVALID_REQUEST|INVALID_SIGNATURE|UNAUTHORIZED)$/)
    }), params)
  }

  it('cards: a mutated card never verifies, and any JSON gets a typed error', async () => {
    expect((await verifyCard(card)).seq).toBe(7)
    await neverAcceptsAChange(card, async v => verifyCard(v, { expectAgent: card.agent_id }))
    await fc.assert(fc.asyncProperty(json, async (v) => {
      expect((await typedFailure(async () => verifyCard(v)))?.code).toMatch(/^INVALID_/)
    }), params)
  })

  it('card DHT records: any bytes are refused with a typed error; the selector picks the highest seq that verifies', async () => {
    const rkey = cardRecordKey(card.agent_id)
    await fc.assert(fc.asyncProperty(fc.uint8Array({ maxLength: 200 }), async (bytes) => {
      expect((await typedFailure(async () => validateCardRecord(rkey, bytes)))?.code).toMatch(/^INVALID_/)
    }), params)
    const older = encodeCardRecord(await issueCard(key, draft, 3))
    const newer = encodeCardRecord(card)
    const forgedNewer = encodeCardRecord({ ...card, seq: 99 })
    await fc.assert(fc.asyncProperty(fc.array(fc.oneof(fc.uint8Array({ maxLength: 40 }), fc.constant(older), fc.constant(forgedNewer)), { maxLength: 5 }), fc.nat(), async (noise, at) => {
      const records = [...noise]
      const pos = at % (records.length + 1)
      records.splice(pos, 0, newer)
      expect(await selectCardRecord(rkey, records)).toBe(pos)
    }), { numRuns: 30 })
    expect(decodeCardRecord(newer)).toEqual(card)
  })

  it('events: a mutated event never verifies, and any JSON gets a typed error', async () => {
    expect(verifyEventSync(next).seq).toBe(2)
    await neverAcceptsAChange(event, v => verifyEventSync(v))
    await neverAcceptsAChange(next, v => verifyEventSync(v))
    await fc.assert(fc.asyncProperty(json, async (v) => {
      expect((await typedFailure(() => verifyEventSync(v)))?.code).toMatch(/^INVALID_/)
    }), params)
  })

  it('tickets: a mutated delegation or handoff ticket never verifies, and any JSON gets a typed error', async () => {
    expect(verifyTicket(handoff).depth).toBe(1)
    await neverAcceptsAChange(delegation, v => verifyTicket(v))
    await neverAcceptsAChange(handoff, v => verifyTicket(v))
    await fc.assert(fc.asyncProperty(json, async (v) => {
      expect((await typedFailure(() => verifyTicket(v)))?.code).toMatch(/^INVALID_/)
    }), params)
  })
})
