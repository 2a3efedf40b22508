/**
 * A responder that ends its side of a stream (as it does with an idle one)
 * can answer nothing more on it: the client's session sees the end, fails
 * what waits on it at once, and the next call opens a new stream instead of
 * sending into one that will never answer (it waited for its response
 * timeout before).
 */
import type { Stream, StreamMessageEvent } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { FrameDecoder, RpcClient, encodeFrame } from '../src/wire/rpc.ts'
import type { MeshHost } from '../src/wire/host.ts'
import { dialAddrs } from '../src/wire/host.ts'
import { startLoopbackHost } from './helpers.ts'

const PROTOCOL = '/aap-test/one-answer/0.1.0'

describe('a stream the responder ended', () => {
  let a: MeshHost, b: MeshHost
  let streams = 0

  beforeAll(async () => {
    a = await startLoopbackHost()
    b = await startLoopbackHost()
    // answers one request per stream, then ends its side of it
    await b.handle(PROTOCOL, (stream: Stream) => {
      streams++
      const frames = new FrameDecoder(1024)
      stream.addEventListener('message', (evt: StreamMessageEvent) => {
        const data = evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()
        for (const f of frames.push(data)) {
          const req = JSON.parse(new TextDecoder().decode(f)) as { id: number }
          stream.send(encodeFrame({ id: req.id, ok: true, body: { stream: streams } }))
          void stream.close()
        }
      })
    })
    expect((await dialAddrs(a, b.getMultiaddrs().map(m => m.toString()))).length).toBe(1)
  })
  afterAll(async () => {
    await a.stop()
    await b.stop()
  })

  it('is not picked again: the next call opens a new stream and is answered', async () => {
    const client = new RpcClient(a, { protocol: PROTOCOL, maxFrameBytes: 1024, maxStreamsPerPeer: 1 })
    try {
      expect(await client.call(b.peerId, 'one', {}, { responseTimeoutMs: 10_000, callTimeoutMs: 10_000 })).toEqual({ stream: 1 })
      expect(await client.call(b.peerId, 'two', {}, { responseTimeoutMs: 10_000, callTimeoutMs: 10_000 })).toEqual({ stream: 2 })
    } finally {
      client.close()
    }
  })
})
