/**
 * The responder's bounds while a caller does not read its answers
 * (src/wire/responder.ts, src/wire/held-answers.ts), found by session 57's
 * review:
 * - the frame completion timer bounds each frame from its own first byte,
 *   also while the responder holds its reads. It stopped whenever reads were
 *   held, even when nothing of the frame waited unread in the stream's
 *   buffer: a caller that sent the start of a frame behind requests whose
 *   answers it never read kept the frame's buffer here until the idle timer
 *   (two minutes);
 * - a stream the caller resets leaves the node-wide count of unread answers.
 *   A request that failed after the stream closed was still answered: the
 *   answer put the dead stream back into the count, whose write buffer a
 *   reset does not clear, so its bytes (1.7 MB here) were counted for good
 *   and pushed live callers toward being shed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { componentLogger } from '../src/logger.ts'
import { encodeFrame } from '../src/wire/framing.ts'
import { HeldAnswers } from '../src/wire/held-answers.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { serve } from '../src/wire/rpc.ts'
import { RawWire, lengthPrefix, pipelinedRequests } from './fixtures/raw-wire.ts'
import { startLoopbackHost, until } from './helpers.ts'

const ANSWER_BYTES = 100 * 1024
const big = 'x'.repeat(ANSWER_BYTES)

/** A caller and a responder serving `big` (and `more` methods) on `protocol` with `opts`. */
async function servingPair (protocol: string, opts: Partial<Parameters<typeof serve>[1]>): Promise<{ caller: MeshHost, responder: MeshHost, stop: () => Promise<void> }> {
  const caller = await startLoopbackHost()
  const responder = await startLoopbackHost()
  await caller.peerStore.merge(responder.peerId, { multiaddrs: responder.getMultiaddrs() })
  const unserve = await serve(responder, {
    protocol,
    maxFrameBytes: 128 * 1024,
    ...opts,
    methods: { big: { handle: async () => ({ data: big }) }, ...opts.methods }
  })
  return {
    caller,
    responder,
    stop: async () => {
      await unserve()
      await caller.stop()
      await responder.stop()
    }
  }
}

const FRAME_PROTO = '/aap-test/responder-held-frame/0.1.0'
const FRAME_TIMEOUT_MS = 300
const REQUESTS = 100
const FRAME_BYTES = 120 * 1024
const SENT_BYTES = 100 * 1024

describe('a frame left unfinished while the responder holds its reads', () => {
  let caller: MeshHost, responder: MeshHost
  let stop: () => Promise<void>
  let held = Promise.withResolvers<void>()
  beforeAll(async () => {
    ;({ caller, responder, stop } = await servingPair(FRAME_PROTO, { frameTimeoutMs: FRAME_TIMEOUT_MS, onReadsHeld: () => { held.resolve() } }))
  })
  afterAll(async () => { await stop() })

  it('cuts the stream once the frame is not complete within the frame timeout', async () => {
    held = Promise.withResolvers<void>()
    const wire = await RawWire.open(caller, responder.peerId, FRAME_PROTO)
    try {
      wire.stream.pause()
      const requests = pipelinedRequests(REQUESTS, 'big')
      const prefix = lengthPrefix(FRAME_BYTES)
      // the requests, then the first SENT_BYTES of a frame of FRAME_BYTES: one chunk, and nothing of the answers read
      const chunk = new Uint8Array(requests.byteLength + SENT_BYTES)
      chunk.set(requests, 0)
      chunk.set(prefix, requests.byteLength)
      chunk.fill(0x20, requests.byteLength + prefix.byteLength)
      wire.write(chunk)
      await held.promise
      await wire.closed
      expect(wire.isClosed).toBe(true)
    } finally {
      wire.abort()
    }
  }, 20_000)
})

const RESET_PROTO = '/aap-test/responder-reset-held/0.1.0'
const BIG_REQUESTS = 20

describe('a stream reset while its answers wait unread', () => {
  let caller: MeshHost, responder: MeshHost
  let stop: () => Promise<void>
  const budget = new HeldAnswers(64 * 1024 * 1024, componentLogger(undefined, 'test'))
  let gaveUp = Promise.withResolvers<void>()
  beforeAll(async () => {
    ;({ caller, responder, stop } = await servingPair(RESET_PROTO, {
      heldAnswers: budget,
      methods: {
        wait: {
          handle: async (_body, ctx) => new Promise((_resolve, reject) => {
            ctx.signal.addEventListener('abort', () => {
              reject(ctx.signal.reason)
              gaveUp.resolve()
            }, { once: true })
          })
        }
      }
    }))
  })
  afterAll(async () => { await stop() })

  it('is counted no more once reset, though its handler fails after the reset', async () => {
    gaveUp = Promise.withResolvers<void>()
    const wire = await RawWire.open(caller, responder.peerId, RESET_PROTO)
    wire.stream.pause()
    const wait = encodeFrame({ id: 1000, type: 'wait', body: {} })
    const bigs = pipelinedRequests(BIG_REQUESTS, 'big')
    const chunk = new Uint8Array(wait.byteLength + bigs.byteLength)
    chunk.set(wait, 0)
    chunk.set(bigs, wait.byteLength)
    wire.write(chunk)
    const held = (): number => {
      let most = 0
      for (const c of responder.getConnections(caller.peerId)) {
        for (const s of c.streams) if (s.protocol === RESET_PROTO) most = Math.max(most, s.writeBufferLength)
      }
      return most
    }
    await until(() => held() > 1024 * 1024, 'the responder to hold over 1 MiB for the stream')
    wire.abort()
    await gaveUp.promise
    // the responder's own rejection handler runs a few microtasks after the handler's promise rejects
    await new Promise<void>(resolve => { setImmediate(resolve) })
    expect(budget.streams).toBe(0)
    expect(budget.bytes).toBe(0)
  })
})
