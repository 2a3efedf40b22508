/**
 * The frame completion timer of the responder (src/wire/responder.ts armPartial) bounds each frame from its
 * own first byte, also while the responder holds its reads (a caller that does not read its answers). A review
 * found the timer stopped whenever reads were held, even when nothing of the frame waited unread in the
 * stream's buffer: a caller that sent the start of a frame behind requests it never read the answers of kept
 * the frame's buffer here until the idle timer (two minutes).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { MeshHost } from '../src/wire/host.ts'
import { serve } from '../src/wire/rpc.ts'
import { RawWire, lengthPrefix, pipelinedRequests } from './fixtures/raw-wire.ts'
import { startLoopbackHost } from './helpers.ts'

const PROTO = '/aap-test/responder-held-frame/0.1.0'
const FRAME_TIMEOUT_MS = 300
const ANSWER_BYTES = 100 * 1024
const REQUESTS = 100
const FRAME_BYTES = 120 * 1024
const SENT_BYTES = 100 * 1024

describe('a frame left unfinished while the responder holds its reads', () => {
  let caller: MeshHost, responder: MeshHost
  let unserve: () => Promise<void>
  let held = Promise.withResolvers<void>()
  const big = 'x'.repeat(ANSWER_BYTES)
  beforeAll(async () => {
    caller = await startLoopbackHost()
    responder = await startLoopbackHost()
    await caller.peerStore.merge(responder.peerId, { multiaddrs: responder.getMultiaddrs() })
    unserve = await serve(responder, {
      protocol: PROTO,
      maxFrameBytes: 128 * 1024,
      frameTimeoutMs: FRAME_TIMEOUT_MS,
      onReadsHeld: () => { held.resolve() },
      methods: { big: { handle: async () => ({ data: big }) } }
    })
  })
  afterAll(async () => {
    await unserve()
    await caller.stop()
    await responder.stop()
  })

  it('cuts the stream once the frame is not complete within the frame timeout', async () => {
    held = Promise.withResolvers<void>()
    const wire = await RawWire.open(caller, responder.peerId, PROTO)
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
