/**
 * An Outbox that waits for its stream to drain (src/wire/outbox.ts nextDrain) waits for a drain of its own
 * stream. The muxer tells every stream of a connection 'drain' when the connection drains (onMuxerDrain), also
 * a stream whose peer gave it no window: a review found the outbox took that as its drain, stopped waiting and
 * queued the next answers into a stream that could still send nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { Outbox } from '../src/wire/outbox.ts'
import { startLoopbackHost, until } from './helpers.ts'

const PROTO = '/aap-test/outbox-drain/0.1.0'
const FRAME_BYTES = 1024 * 1024

describe('an outbox waiting for its stream to drain', () => {
  let caller: MeshHost, responder: MeshHost
  beforeAll(async () => {
    caller = await startLoopbackHost()
    responder = await startLoopbackHost()
    await caller.peerStore.merge(responder.peerId, { multiaddrs: responder.getMultiaddrs() })
    // the far end reads nothing: the stream's send window runs out
    await responder.handle(PROTO, (stream) => { stream.pause() })
  })
  afterAll(async () => {
    await caller.stop()
    await responder.stop()
  })

  it('goes on waiting after a drain of the connection that lets its stream send nothing', async () => {
    const stream = await caller.dialProtocol(responder.peerId, PROTO, { signal: AbortSignal.timeout(5_000) })
    try {
      const outbox = new Outbox(stream, silentLogger())
      let sent = 0
      await until(async () => {
        await outbox.send(new Uint8Array(FRAME_BYTES))
        sent++
        return outbox.waiting
      }, 'the stream to need a drain')
      expect(stream.writeBufferLength).toBeGreaterThan(0)
      // what the muxer does for every stream when the connection drains
      stream.dispatchEvent(new Event('drain'))
      // the stream retries its buffer in a microtask; the outbox decides after it
      await new Promise<void>(resolve => { setImmediate(resolve) })
      expect(stream.writableNeedsDrain).toBe(true)
      expect(outbox.waiting).toBe(true)
      expect(sent).toBeGreaterThan(0)
    } finally {
      stream.abort(new Error('test done'))
    }
  })
})
