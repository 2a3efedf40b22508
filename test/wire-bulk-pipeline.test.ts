/**
 * How a bulk answer leaves a responder, between two real nodes over TCP:
 *
 *  - while one answer waits to drain (its caller reads slower than it asks),
 *    the responder makes the next request's answer, so the stream does not
 *    run dry between answers; never more than that one ahead, and the answers
 *    still arrive whole and in order;
 *  - the outbox hands a large frame to the stream as it is (no joined copy of
 *    a MiB chunk), joins the small frames around it, and the bytes arrive in
 *    the order they were sent.
 */
import type { Stream } from '@libp2p/interface'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { silentLogger } from '../src/logger.ts'
import type { MeshNode } from '../src/node.ts'
import { serveTestBulk } from './fixtures/test-bulk.ts'
import { FrameDecoder, encodeFrame } from '../src/wire/framing.ts'
import { OUTBOX_JOIN_MAX_BYTES } from '../src/wire/network-constants.ts'
import { Outbox } from '../src/wire/outbox.ts'
import { startMesh, stopAll, until } from './helpers.ts'

const BULK = '/aap-test/bulk-pipeline/0.1.0'
const SINK = '/aap-test/outbox-sink/0.1.0'
const CHUNK_BYTES = 2 * 1024 * 1024

/** Answer i's bytes: every byte is (i + offset) mod 251, so a swapped or cut answer shows. */
function pattern (i: number, bytes: number): Uint8Array {
  const out = new Uint8Array(bytes)
  for (let k = 0; k < bytes; k++) out[k] = (i + k) % 251
  return out
}

async function turns (n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise(resolve => setImmediate(resolve))
}

describe('bulk answers: the next one made while one drains, large frames not copied', () => {
  let nodes: MeshNode[] = []
  let A: MeshNode, B: MeshNode
  let unserve: (() => Promise<void>) | undefined
  const asked: number[] = []
  const sunk: Uint8Array[] = []
  let sinkEnded = false

  beforeAll(async () => {
    nodes = await startMesh(2)
    ;[A, B] = nodes as [MeshNode, MeshNode]
    unserve = await serveTestBulk(B.host, BULK, {
      chunk: async (body) => {
        const i = Number(body.i)
        asked.push(i)
        return { body: { i }, data: pattern(i, CHUNK_BYTES) }
      }
    }, { maxPipelined: 8, handlerTimeoutMs: 10_000 })
    await B.host.handle(SINK, (stream: Stream) => {
      stream.addEventListener('message', (evt) => { sunk.push(evt.data instanceof Uint8Array ? evt.data : evt.data.subarray()) })
      stream.addEventListener('remoteCloseWrite', () => { sinkEnded = true })
    })
  })
  afterAll(async () => {
    await unserve?.()
    await stopAll(nodes)
  })

  it('makes the next answer while one drains, one ahead at most, and every answer arrives whole and in order', async () => {
    const stream = await A.host.dialProtocol(B.host.peerId, BULK, { signal: AbortSignal.timeout(5_000) })
    const frames: Uint8Array[] = []
    const decoder = new FrameDecoder(CHUNK_BYTES + 1024)
    stream.addEventListener('message', (evt) => {
      for (const f of decoder.push(evt.data instanceof Uint8Array ? evt.data : evt.data.subarray())) frames.push(f)
    })
    // the caller asks for four chunks of 2 MiB and reads nothing yet
    stream.pause()
    for (let i = 0; i < 4; i++) stream.send(encodeFrame({ id: i + 1, type: 'chunk', body: { i } }))
    // the first answer cannot drain (2 MiB against a window of at most 2 MiB, nothing read): the second is made meanwhile
    await until(() => asked.length === 2, 'the responder to make the second answer while the first drains')
    await turns(50)
    expect(asked).toEqual([0, 1])
    stream.resume()
    await until(() => frames.length === 8, 'all four answers')
    expect(asked).toEqual([0, 1, 2, 3])
    for (let i = 0; i < 4; i++) {
      const head = JSON.parse(new TextDecoder().decode(frames[2 * i])) as { id: number, ok: boolean, body: { i: number }, data: number }
      expect(head).toEqual({ id: i + 1, ok: true, body: { i }, data: CHUNK_BYTES })
      expect(Buffer.from(frames[2 * i + 1]!).equals(Buffer.from(pattern(i, CHUNK_BYTES)))).toBe(true)
    }
    await stream.close({ signal: AbortSignal.timeout(5_000) })
  })

  it('hands a large frame to the stream as it is and joins the small ones around it, in order', async () => {
    const stream = await A.host.dialProtocol(B.host.peerId, SINK, { signal: AbortSignal.timeout(5_000) })
    const handed: Uint8Array[] = []
    const send = stream.send.bind(stream)
    stream.send = (data) => {
      if (data instanceof Uint8Array) handed.push(data)
      return send(data)
    }
    const outbox = new Outbox(stream, silentLogger())
    const small = (b: number): Uint8Array => new Uint8Array(100).fill(b)
    const large = pattern(7, OUTBOX_JOIN_MAX_BYTES * 4)
    const sent = [small(1), large, small(2), small(3)]
    const results = sent.map(async f => outbox.send(f))
    expect(await Promise.all(results)).toEqual([true, true, true, true])
    await outbox.whenSent()
    // three writes: the first small frame, the large one itself (no copy), the last two joined
    expect(handed.length).toBe(3)
    expect(handed[1]).toBe(large)
    expect(handed.map(h => h.byteLength)).toEqual([100, large.byteLength, 200])
    await stream.close({ signal: AbortSignal.timeout(5_000) })
    await until(() => sinkEnded, 'the sink to see the end of the stream')
    const got = Buffer.concat(sunk)
    expect(got.equals(Buffer.concat(sent))).toBe(true)
  })
})
