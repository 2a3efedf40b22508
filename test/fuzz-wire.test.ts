/**
 * Fuzz properties of the stream responder, on real nodes (memory transport):
 * for every aap stream protocol, mutated requests, arbitrary JSON and
 * arbitrary bytes written on a real libp2p stream. Every well-framed frame
 * gets exactly one answer that is a valid response envelope; bytes that break
 * the framing get a stream-level error frame and a closed stream; nothing
 * hangs (each stream ends within a bound) and the node keeps serving.
 */
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  CARD_MAX_FRAME_BYTES, CARD_PROTOCOL, CONTROL_MAX_FRAME_BYTES, CONTROL_PROTOCOL, DELEGATE_MAX_FRAME_BYTES, DELEGATE_PROTOCOL,
  EVENTS_SYNC_MAX_FRAME_BYTES, EVENTS_SYNC_PROTOCOL, HANDLER_TIMEOUT_MS, HANDOFF_MAX_FRAME_BYTES, HANDOFF_PROTOCOL
} from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { newRunId } from '../src/runlog/event.ts'
import { schema } from '../src/schema/validate.ts'
import { rawCall } from '../src/wire/raw.ts'
import { encodeFrame } from '../src/wire/rpc.ts'
import { json, mutate, mutation, wireSeeds } from './fixtures/fuzz.ts'
import { RawWire, lengthPrefix, rawFrame, type ResponseFrame } from './fixtures/raw-wire.ts'
import { startMesh, stopAll } from './helpers.ts'

const PROTOCOLS = [CARD_PROTOCOL, DELEGATE_PROTOCOL, CONTROL_PROTOCOL, HANDOFF_PROTOCOL, EVENTS_SYNC_PROTOCOL]
const LIMITS: Record<string, number> = {
  [CARD_PROTOCOL]: CARD_MAX_FRAME_BYTES,
  [DELEGATE_PROTOCOL]: DELEGATE_MAX_FRAME_BYTES,
  [CONTROL_PROTOCOL]: CONTROL_MAX_FRAME_BYTES,
  [HANDOFF_PROTOCOL]: HANDOFF_MAX_FRAME_BYTES,
  [EVENTS_SYNC_PROTOCOL]: EVENTS_SYNC_MAX_FRAME_BYTES
}

function concat (parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0))
  let at = 0
  for (const p of parts) { out.set(p, at); at += p.byteLength }
  return out
}
const isResponse = schema<ResponseFrame>('aap:common#/definitions/ResponseEnvelope')
/** A stream must be answered and closed within this: the handler bound plus room for a loaded machine. */
const STREAM_BOUND_MS = HANDLER_TIMEOUT_MS + 20_000
const RUNS_PER_PROTOCOL = 40

async function within<T> (p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const limit = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => { reject(new Error(`hang: ${what} after ${ms} ms`)) }, ms) })
  try {
    return await Promise.race([p, limit])
  } finally {
    clearTimeout(timer)
  }
}

/** Every frame the responder sent before it closed its side. */
async function answersUntilEnd (w: RawWire): Promise<ResponseFrame[]> {
  await w.ended
  const out: ResponseFrame[] = []
  for (;;) {
    try {
      out.push(await w.next())
    } catch {
      return out // next() throws once the frames read before the end are all taken
    }
  }
}

describe('fuzz: every stream protocol answers or closes, never crashes or hangs', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode
  let B: MeshNode
  let seeds: ReturnType<typeof wireSeeds>

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    await B.publishCard({ name: 'fuzz-target', capabilities: [{ capability_id: 'cap:fuzz', version: '1.0.0' }] })
    seeds = wireSeeds(B.agentId, newRunId(B.agentId))
  })

  afterAll(async () => { await stopAll(nodes) })

  /** One well-framed frame: a mutated seed request, its envelope mutated, arbitrary JSON, or arbitrary bytes. */
  const frame = (protocol: string): fc.Arbitrary<Uint8Array> => {
    const list = seeds[protocol] ?? []
    return fc.oneof(
      fc.tuple(fc.constantFrom(...list), mutation, fc.nat(1000)).map(([s, m, id]) => encodeFrame({ id, type: s.type, body: mutate(s.body, m) })),
      fc.tuple(fc.constantFrom(...list), mutation, fc.nat(1000)).map(([s, m, id]) => encodeFrame(mutate({ id, type: s.type, body: s.body }, m))),
      json.map(v => encodeFrame(v)),
      fc.uint8Array({ maxLength: 64 }).map(b => rawFrame(b))
    )
  }

  for (const protocol of PROTOCOLS) {
    it(`${protocol}: each well-framed frame gets exactly one valid answer, and the stream closes`, async () => {
      await fc.assert(fc.asyncProperty(fc.array(frame(protocol), { minLength: 1, maxLength: 6 }), async (frames) => {
        const w = await RawWire.open(A.host, B.host.peerId, protocol)
        try {
          for (const f of frames) w.write(f)
          await w.closeWrite()
          const answers = await within(answersUntilEnd(w), STREAM_BOUND_MS, `${frames.length} frames on ${protocol}`)
          expect(answers).toHaveLength(frames.length)
          for (const a of answers) expect(isResponse(a)).toBe(true)
        } finally {
          w.abort()
        }
      }), { numRuns: RUNS_PER_PROTOCOL })
    })

    it(`${protocol}: the frames before one over the limit are answered, then one stream-level error, however they arrive`, async () => {
      await fc.assert(fc.asyncProperty(fc.array(frame(protocol), { maxLength: 5 }), async (frames) => {
        const w = await RawWire.open(A.host, B.host.peerId, protocol)
        try {
          // one write: the bad prefix arrives in the same chunk as the whole frames before it
          w.write(concat([...frames, lengthPrefix(LIMITS[protocol]! + 1)]))
          const answers = await within(answersUntilEnd(w), STREAM_BOUND_MS, `frames and an oversized prefix on ${protocol}`)
          expect(answers).toHaveLength(frames.length + 1)
          for (const a of answers) expect(isResponse(a)).toBe(true)
          expect(answers.filter(a => a.id === null && a.error?.details?.reason === 'oversized')).toHaveLength(1)
        } finally {
          w.abort()
        }
      }), { numRuns: RUNS_PER_PROTOCOL / 4 })
    })

    it(`${protocol}: arbitrary bytes get valid answers or a stream-level error, and the stream closes`, async () => {
      const chunk = fc.oneof(fc.uint8Array({ maxLength: 48 }), frame(protocol))
      await fc.assert(fc.asyncProperty(fc.array(chunk, { minLength: 1, maxLength: 5 }), async (chunks) => {
        const w = await RawWire.open(A.host, B.host.peerId, protocol)
        try {
          for (const c of chunks) w.write(c)
          await w.closeWrite()
          const answers = await within(answersUntilEnd(w), STREAM_BOUND_MS, `raw bytes on ${protocol}`)
          for (const a of answers) expect(isResponse(a)).toBe(true)
          // framing is lost at most once: one stream-level error (the requests read before it are still answered)
          const fatal = answers.filter(a => a.id === null && ['oversized', 'bad_prefix', 'truncated'].includes(String(a.error?.details?.reason)))
          expect(fatal.length).toBeLessThanOrEqual(1)
        } finally {
          w.abort()
        }
      }), { numRuns: RUNS_PER_PROTOCOL })
    })
  }

  it('the fuzzed node still serves an honest call', async () => {
    const answer = await rawCall(A.host, B.host.peerId, CARD_PROTOCOL, 'get_card', {})
    expect(answer.ok).toBe(true)
    expect((answer.body?.card as { agent_id?: string } | undefined)?.agent_id).toBe(B.agentId)
  })
})
