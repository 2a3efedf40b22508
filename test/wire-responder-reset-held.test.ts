/**
 * A stream the caller resets while its answers wait unread leaves the node-wide count of unread answers
 * (src/wire/held-answers.ts). A review found that a request that failed after the stream closed was still
 * answered: the answer put the dead stream back into the count, whose write buffer a reset does not clear, so
 * its bytes (1.7 MB in the review's setup) were counted for good and pushed live callers toward being shed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { componentLogger } from '../src/logger.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { HeldAnswers } from '../src/wire/held-answers.ts'
import { serve } from '../src/wire/rpc.ts'
import { RawWire, pipelinedRequests } from './fixtures/raw-wire.ts'
import { startLoopbackHost, until } from './helpers.ts'
import { encodeFrame } from '../src/wire/framing.ts'

const PROTO = '/aap-test/responder-reset-held/0.1.0'
const ANSWER_BYTES = 100 * 1024
const BIG_REQUESTS = 20

describe('a stream reset while its answers wait unread', () => {
  let caller: MeshHost, responder: MeshHost
  let unserve: () => Promise<void>
  const budget = new HeldAnswers(64 * 1024 * 1024, componentLogger(undefined, 'test'))
  let gaveUp = Promise.withResolvers<void>()
  const big = 'x'.repeat(ANSWER_BYTES)
  beforeAll(async () => {
    caller = await startLoopbackHost()
    responder = await startLoopbackHost()
    await caller.peerStore.merge(responder.peerId, { multiaddrs: responder.getMultiaddrs() })
    unserve = await serve(responder, {
      protocol: PROTO,
      maxFrameBytes: 128 * 1024,
      heldAnswers: budget,
      methods: {
        big: { handle: async () => ({ data: big }) },
        wait: {
          handle: async (_body, ctx) => new Promise((_resolve, reject) => {
            ctx.signal.addEventListener('abort', () => {
              reject(ctx.signal.reason)
              gaveUp.resolve()
            }, { once: true })
          })
        }
      }
    })
  })
  afterAll(async () => {
    await unserve()
    await caller.stop()
    await responder.stop()
  })

  it('is counted no more once reset, though its handler fails after the reset', async () => {
    gaveUp = Promise.withResolvers<void>()
    const wire = await RawWire.open(caller, responder.peerId, PROTO)
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
        for (const s of c.streams) if (s.protocol === PROTO) most = Math.max(most, s.writeBufferLength)
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
