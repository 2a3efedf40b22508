/**
 * Guards the responder's close after a half-close (src/wire/responder.ts maybeFinish): protocols/README.md says
 * that when the caller closes its writable end, the responder answers every request it has read, then closes
 * its end. It closed once its outbox saw the stream's first drain (Outbox.whenSent) and gave stream.close()
 * STREAM_CLOSE_TIMEOUT_MS (1 s) to pass on the rest of its write buffer, else reset the stream: a caller that
 * half-closed and read a large answer slowly had it reset under it (a review). Now it closes once the write
 * buffer is empty (Outbox.whenEmpty), waiting up to RESPONSE_TIMEOUT_MS for the caller to read.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Stream } from '@libp2p/interface'
import { STREAM_CLOSE_TIMEOUT_MS } from '../src/constants.ts'
import type { MeshNode } from '../src/node.ts'
import { serve } from '../src/wire/rpc.ts'
import { RawWire } from './fixtures/raw-wire.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const PROTO = '/aap-test/halfclose/0.1.0'
const ANSWER_CHARS = 4 * 1024 * 1024
/** How long the caller stops reading after its first window: well past STREAM_CLOSE_TIMEOUT_MS. */
const SLOW_MS = STREAM_CLOSE_TIMEOUT_MS * 2.5

describe('a half-closed caller reading a large answer slowly', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let unserve: () => Promise<void>
  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    unserve = await serve(B.host, {
      protocol: PROTO,
      maxFrameBytes: 2 * ANSWER_CHARS,
      methods: { page: { handle: async () => ({ data: 'x'.repeat(ANSWER_CHARS) }) } }
    })
  })
  afterAll(async () => {
    await unserve()
    await stopAll(nodes)
  })

  it('delivers the whole answer, then closes its end', async () => {
    const wire = await RawWire.open(A.host, B.host.peerId, PROTO)
    let seen: Stream | undefined
    const inbound = (): Stream | undefined => {
      seen = B.host.getConnections(A.host.peerId).flatMap(c => c.streams).find(s => s.protocol === PROTO && s.direction === 'inbound') ?? seen
      return seen
    }
    try {
      wire.stream.pause()
      wire.request({ id: 1, type: 'page', body: {} })
      await wire.closeWrite()
      await until(() => inbound()?.writableNeedsDrain === true, 'B to fill A\'s window')
      const full = inbound()?.writeBufferLength ?? 0
      expect(full).toBeGreaterThan(0)
      // A reads what it holds (one window) and stops again at once; B's stream drains once, the point the old
      // code took for "every answer sent"
      // (paused after resume() returns: a pause inside its dispatch would be undone by the window update it sends last)
      wire.stream.addEventListener('message', () => { queueMicrotask(() => { wire.stream.pause() }) }, { once: true })
      wire.stream.resume()
      await until(() => (inbound()?.writeBufferLength ?? 0) < full, 'B to pass on more of its answer')
      expect(inbound()?.writeBufferLength ?? 0).toBeGreaterThan(0)
      const t0 = Date.now()
      // B must wait for A; the old code reset the stream after STREAM_CLOSE_TIMEOUT_MS (bounded poll)
      await until(() => inbound()?.status !== 'open' || Date.now() - t0 > SLOW_MS, 'B to reset the stream or SLOW_MS to pass')
      expect(inbound()?.status).toBe('open')
      wire.stream.resume()
      const answer = await wire.next()
      expect(answer).toMatchObject({ id: 1, ok: true })
      expect((answer.body?.data as string).length).toBe(ANSWER_CHARS)
      // and then B closes its end
      await wire.ended
    } finally {
      wire.abort()
    }
  })
})
