/**
 * A stream that is closed before a call's request leaves it carries nothing
 * to the peer, so the call is sent on another stream (RPC_UNSENT_RETRIES_MAX)
 * instead of failing with AGENT_NOT_FOUND "stream ... is closed". The
 * simulation at 200 nodes lost one delegation of 40 that way: a stream the
 * peer reset as it was opened (its stream limits, a connection pruned).
 */
import type { Stream, StreamMessageEvent } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { FrameDecoder, RpcClient, encodeFrame } from '../src/wire/rpc.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { dialAddrs } from '../src/wire/host.ts'
import { startLoopbackHost } from './helpers.ts'

const PROTOCOL = '/aap-test/unsent/0.1.0'

describe('a stream closed before the request left', () => {
  let a: MeshHost, b: MeshHost
  let streams = 0

  beforeAll(async () => {
    a = await startLoopbackHost()
    b = await startLoopbackHost()
    // the first stream is reset as soon as it opens; later ones are answered
    await b.handle(PROTOCOL, (stream: Stream) => {
      streams++
      if (streams === 1) {
        stream.abort(new Error('refused at once'))
        return
      }
      const frames = new FrameDecoder(1024)
      stream.addEventListener('message', (evt: StreamMessageEvent) => {
        const data = evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()
        for (const f of frames.push(data)) {
          const req = JSON.parse(new TextDecoder().decode(f)) as { id: number }
          stream.send(encodeFrame({ id: req.id, ok: true, body: { stream: streams } }))
        }
      })
    })
    expect((await dialAddrs(a, b.getMultiaddrs().map(m => m.toString()))).length).toBe(1)
  })
  afterAll(async () => {
    await a.stop()
    await b.stop()
  })

  it('is sent on another stream and answered', async () => {
    const client = new RpcClient(a, { protocol: PROTOCOL, maxFrameBytes: 1024, maxStreamsPerPeer: 1 })
    try {
      const answer = await client.call(b.peerId, 'one', {}, { responseTimeoutMs: 10_000, callTimeoutMs: 10_000 }).then(r => r, (err: { code?: string, message?: string }) => `${err.code}: ${err.message}`)
      expect(answer).toEqual({ stream: 2 })
      expect(client.stats.unsentRetries).toBe(1)
    } finally {
      client.close()
    }
  })
})
